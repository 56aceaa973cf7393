-- Read new entries of one shard for a member: a fenced, non-blocking XREADGROUP ... '>'.
-- Prefixed with fence.lua (which defines fence()).
--
-- KEYS[1]  rsc:{P}:meta                 KEYS[2]  rsc:{P}:<shard> (the shard's stream)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch   ARGV[4]  shard (v<n>:<i>)
-- ARGV[5]  count (at most this many entries)
--
-- Returns {status} when fenced (see fence.lua), else {'OK', {{id, {field, value, ...}}, ...}}.
-- Touches: the fence's fields (read); only when OK: XREADGROUP on KEYS[2] (advances the group's
-- last-delivered id, adds the entries to the member's pending list, creates the consumer).
local status = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'read')
if status ~= 'OK' then
  return {status}
end
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[5], 'STREAMS', KEYS[2], '>')
if not reply then
  return {status, {}}
end
return {status, reply[1][2]}
