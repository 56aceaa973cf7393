-- Acknowledge entries of one shard: a fenced XACK. After fence.lua in the library.
-- Unlike reads, an ack is allowed on a shard being revoked (mode V) or held back (mode B): the member
-- finishes what it read before it releases the shard.
--
-- KEYS[1]  rsc:{P}:meta                 KEYS[2]  rsc:{P}:<shard>
-- KEYS[3]  rsc:{P}:lr: the members' own lease renewals (the fence's; always the last key)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch   ARGV[4]  shard
-- ARGV[5..] entry ids
--
-- Returns {status} when fenced, else {'OK', number of entries acknowledged}.
-- Touches: the fence's fields (read); only when OK: XACK on KEYS[2].
local status = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'ack', KEYS[#KEYS])
if status ~= 'OK' then
  return {status}
end
local ids = {}
for i = 5, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
local acked = 0
for _, n in ipairs(call_chunked({'XACK', KEYS[2], ARGV[1]}, ids)) do
  acked = acked + n
end
return {status, acked}
