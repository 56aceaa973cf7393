-- Every member heartbeat starts here: the per-member heartbeat floor, then the steady-state fast path
-- (renew a STABLE member's lease in one round trip, touching one field). Prefixed with rsc_redis/keys.lua
-- (CREDENTIALS_GENERATION_KEY) and rsc_redis/lease_record.lua.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:hbr:<group>:<member>, the member's heartbeat-floor state (expires by itself)
-- KEYS[3]  rsc:{P}:lr, the members' own lease renewals (read when the l: field has ended)
-- KEYS[4]  rsc:{P}:lz, the lease index (the renewed deadline goes there too)
-- KEYS[5]  (optional) rsc:credentials:generation, when the caller authenticated the request from the
--          credentials it cached under generation ARGV[10] (the API's heartbeat door, one Redis only)
-- ARGV[1]  consumer group
-- ARGV[2]  member id
-- ARGV[3]  member epoch the member sent (decimal; 0 join, -1 leave: floor only, never the fast path)
-- ARGV[4]  reported capacity (decimal), or "" when not reported
-- ARGV[5]  reported owned shards, comma separated in shard order, or "*" when not reported
-- ARGV[6]  digest of the reported client info, or "" when not reported
-- ARGV[7]  digest of the sender's credential identity, or "*" when not checked
-- ARGV[8]  floor: milliseconds per heartbeat sustained (0 = no floor)
-- ARGV[9]  floor: burst (heartbeats accepted back to back)
-- ARGV[10] (with KEYS[5]) the credentials generation the caller's cache was read under
--
-- The floor is a GCRA (generic cell rate algorithm) over a live member's heartbeats, whatever their
-- outcome: KEYS[2] holds the theoretical arrival time. A member id that is not live (m:<g>:<m> absent,
-- e.g. a first join) has no floor here, so unknown ids create no keys.
--
-- Returns {3} when KEYS[5] is given and the credentials generation is no longer ARGV[10] (a credential
-- changed since the caller cached them: nothing touched, the caller authenticates afresh);
-- {2, <retry after ms>} when the floor refuses the heartbeat (nothing else touched);
-- {1, <response json>} when it changed nothing but the lease (renewed here, by Redis's clock): the stored
-- response r: with the group's current epochs (ae:, ge:);
-- else {0}: the caller then takes the full path, which decides everything else (fencing included).
-- Touches: GET KEYS[5]; HEXISTS m:<g>:<m>; HMGET s:/l:/r:<g>:<m>, ae:/ge:<g>; GET/SET KEYS[2]; HGET KEYS[3] (only
-- past l:); HSET l:<g>:<m>; ZADD KEYS[4].
local meta = KEYS[1]
if KEYS[5] and KEYS[5] ~= CREDENTIALS_GENERATION_KEY then
  return redis.error_reply('ERR KEYS[5] must be ' .. CREDENTIALS_GENERATION_KEY)
end
if KEYS[5] and (redis.call('GET', KEYS[5]) or '0') ~= ARGV[10] then
  return {3}
end
local records = require_lease_records_key(meta, KEYS[3])
local index = require_lease_index_key(meta, KEYS[4])
local tag = ARGV[1] .. ':' .. ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local period = tonumber(ARGV[8])
if period > 0 and redis.call('HEXISTS', meta, 'm:' .. tag) == 1 then
  local burst = tonumber(ARGV[9])
  local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
  if tat < now then
    tat = now
  end
  local next_tat = tat + period
  local wait = next_tat - now - period * burst
  if wait > 0 then
    return {2, wait}
  end
  redis.call('SET', KEYS[2], next_tat, 'PX', next_tat - now)
end
if tonumber(ARGV[3]) <= 0 then
  return {0}
end
-- One read: the signature, the lease, the stored response and the group's epochs.
local got = redis.call('HMGET', meta, 's:' .. tag, 'l:' .. tag, 'r:' .. tag, 'ae:' .. ARGV[1], 'ge:' .. ARGV[1])
local sig, response = got[1], got[3]
if not sig or not response or not got[4] or not got[5] then
  return {0}
end
-- A signature is there only while the member is settled (STABLE, owning exactly its target), whatever
-- its epoch: every commit that changes the member or its target rewrites or deletes it.
local epoch, capacity, ttl, client, owner, owned =
  string.match(sig, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
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
if ARGV[7] ~= '*' and ARGV[7] ~= owner then
  return {0}
end
local lease = tonumber(got[2] or '0')
-- Past it, the member may have renewed it itself (while the API could not): a record at this epoch counts.
if lease <= now and renewed_until(meta, records, tag, epoch, now) <= now then
  return {0}
end
-- The stored response (JSON, keys sorted) starts with the epochs of the commit that wrote it; a bump
-- since then that left the member settled moved them on: the answer says the group's current ones.
local rest = string.find(response, ',"heartbeat_interval_ms":', 1, true)
if not rest or string.sub(response, 1, 20) ~= '{"assignment_epoch":' then
  return {0}  -- not as this version stores it: the full path answers, and rewrites it
end
-- The index first: a Redis user without ZADD (an ACL not yet updated) fails here, having renewed nothing.
redis.call('ZADD', index, now + tonumber(ttl), tag)
redis.call('HSET', meta, 'l:' .. tag, now + tonumber(ttl))
return {1, '{"assignment_epoch":' .. got[4] .. ',"group_epoch":' .. got[5] .. string.sub(response, rest)}
