-- The steady-state heartbeat: renew a STABLE member's lease in one round trip, touching one field.
--
-- KEYS[1]  rsc:{P}:meta
-- ARGV[1]  consumer group
-- ARGV[2]  member id
-- ARGV[3]  member epoch the member sent (decimal)
-- ARGV[4]  reported capacity (decimal), or "" when not reported
-- ARGV[5]  reported owned shards, comma separated in shard order, or "*" when not reported
-- ARGV[6]  digest of the reported client info, or "" when not reported
--
-- Returns {1, <response json>} when the heartbeat changed nothing but the lease (renewed here, by
-- Redis's clock), else {0}: the caller then takes the full path, which decides everything else
-- (fencing included). Touches: HGET f:<g>:<m>, l:<g>:<m>, r:<g>:<m>; HSET l:<g>:<m>.
local meta = KEYS[1]
local tag = ARGV[1] .. ':' .. ARGV[2]
local sig = redis.call('HGET', meta, 'f:' .. tag)
if not sig then
  return {0}
end
local epoch, capacity, ttl, client, owned = string.match(sig, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
if ARGV[3] ~= epoch then
  return {0}
end
if ARGV[4] ~= '' and ARGV[4] ~= capacity then
  return {0}
end
if ARGV[5] ~= '*' and ARGV[5] ~= owned then
  return {0}
end
if ARGV[6] ~= '' and ARGV[6] ~= client then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(redis.call('HGET', meta, 'l:' .. tag) or '0')
if lease <= now then
  return {0}
end
redis.call('HSET', meta, 'l:' .. tag, now + tonumber(ttl))
return {1, redis.call('HGET', meta, 'r:' .. tag)}
