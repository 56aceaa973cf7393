-- Delete the Redis consumers of earlier owners of one shard once nothing is pending for them: a fenced
-- XINFO CONSUMERS plus XGROUP DELCONSUMER. After fence.lua in the library.
--
-- A consumer with pending entries is kept: deleting it would drop its pending list (claim its entries
-- first with claim.lua). Fenced like a claim, so only the shard's current, readable owner cleans up.
--
-- KEYS[1]  rsc:{P}:meta                 KEYS[2]  rsc:{P}:<shard>
-- KEYS[3]  rsc:{P}:lr: the members' own lease renewals (the fence's; always the last key)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch   ARGV[4]  shard
--
-- Returns {status} when fenced, else {'OK', number of consumers deleted}.
-- Touches: the fence's fields (read); only when OK: XINFO CONSUMERS and XGROUP DELCONSUMER on KEYS[2].
local status = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'read', KEYS[#KEYS])
if status ~= 'OK' then
  return {status}
end
local deleted = 0
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[2], ARGV[1])) do
  local info = {}
  for i = 1, #consumer, 2 do
    info[consumer[i]] = consumer[i + 1]
  end
  if info['name'] ~= ARGV[2] and tonumber(info['pending']) == 0 then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[2], ARGV[1], info['name'])
    deleted = deleted + 1
  end
end
return {status, deleted}
