-- Read new entries of one shard for a member: a fenced, non-blocking XREADGROUP ... '>'.
-- After fence.lua (fence()) in the library.
--
-- KEYS[1]  rsc:{P}:meta                 KEYS[2]  rsc:{P}:<shard> (the shard's stream)
-- KEYS[3]  rsc:{P}:rd:<group>: the group's redeliver tokens (hash: shard -> counter an operator bumps)
-- KEYS[4]  rsc:{P}:lr: the members' own lease renewals (the fence's; always the last key)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch   ARGV[4]  shard (v<n>:<i>)
-- ARGV[5]  count (at most this many entries)
--
-- Returns {status} when fenced (see fence.lua), else {'OK', {{id, {field, value, ...}}, ...}, token}:
-- token is HGET KEYS[3] ARGV[4], or '0' when the shard was never asked to redeliver. A member that sees
-- the token change re-reads its own pending entries before it handles anything new (the operator's
-- "redeliver"); returning it with every read costs one HGET and no extra round trip.
-- Every entry returned here is delivered for the first time (delivery count 1).
-- Raises a script error if KEYS[3] is not the group's redeliver key under KEYS[1].
-- Touches: the fence's fields (read); only when OK: HGET on KEYS[3]; XREADGROUP on KEYS[2] (advances
-- the group's last-delivered id, adds the entries to the member's pending list, creates the consumer).
local status = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'read', KEYS[#KEYS])
if status ~= 'OK' then
  return {status}
end
local token = redeliver_token(KEYS[1], KEYS[3], ARGV[1], ARGV[4])
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[5], 'STREAMS', KEYS[2], '>')
if not reply then
  return {status, {}, token}
end
return {status, reply[1][2], token}
