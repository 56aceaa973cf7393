-- Dead-letter one entry: copy it to the group's dead-letter stream and XACK it, in one fenced script,
-- so the entry is either still pending or both copied and acked (the opt-in `dead_letter=True` listener
-- policy, after `max_deliveries` failed deliveries). After fence.lua and dead_letter_mac.lua in the
-- library; fenced like an ack (op 'ack'): the owner may finish a shard it is releasing.
--
-- KEYS[1]  rsc:{P}:meta                 KEYS[2]  rsc:{P}:<shard>
-- KEYS[3]  rsc:{P}:dlq:<group>: the group's dead-letter stream
-- KEYS[4]  rsc:{P}:lr: the members' own lease renewals (the fence's; always the last key)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch   ARGV[4]  shard
-- ARGV[5]  the entry id     ARGV[6]  the handler's error, "<Type>: <message>" (the caller truncates it)
--
-- The copy (docs/protocol.md, "Dead-letter entry format") holds every field of the entry, in order, then
-- dlq_source_shard, dlq_source_id, dlq_deliveries (the entry's delivery count, from XPENDING), dlq_error,
-- dlq_member_id and dlq_at_ms (Redis TIME in ms), and last dlq_mac: the MAC of all of the above and of
-- KEYS[3] (rsc_redis/dead_letter_mac.lua), keyed with keys the coordinator rendered into the library
-- and the members do not hold, so that the coordinator can tell a dead letter this function wrote from
-- one a member's user appended with a plain XADD (docs/protocol.md section 14). The dead-letter stream
-- is capped: MAXLEN ~ 100000.
--
-- Returns {status} when fenced, else one of
--   {'OK', 'DEAD_LETTERED', dead-letter entry id, deliveries}   copied and acked
--   {'OK', 'NOT_PENDING'}   the entry is not pending for this member (acked, skipped by an operator, or
--                           a re-sent call that already ran): nothing changed
--   {'OK', 'GONE'}          pending but deleted from the stream (trimmed): nothing to copy; acked, like
--                           read_pending.lua does with such entries
-- Raises a script error if KEYS[3] is not the group's dead-letter key under KEYS[1].
-- Touches: the fence's fields (read); only when OK: XPENDING, XRANGE and XACK on KEYS[2]; XADD on
-- KEYS[3]; TIME.
local status = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'ack', KEYS[#KEYS])
if status ~= 'OK' then
  return {status}
end
require_group_key(KEYS[1], KEYS[3], 'dlq', ARGV[1], 'dead-letter')
local id = ARGV[5]
local pending = redis.call('XPENDING', KEYS[2], ARGV[1], id, id, 1, ARGV[2])
if #pending == 0 then
  return {status, 'NOT_PENDING'}
end
local found = redis.call('XRANGE', KEYS[2], id, id)
if #found == 0 then
  redis.call('XACK', KEYS[2], ARGV[1], id)
  return {status, 'GONE'}
end
local deliveries = pending[1][4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local args = {'XADD', KEYS[3], 'MAXLEN', '~', '100000', '*'}
for _, value in ipairs(found[1][2]) do
  args[#args + 1] = value
end
for _, value in ipairs({
  'dlq_source_shard', ARGV[4], 'dlq_source_id', id, 'dlq_deliveries', string.format('%d', deliveries),
  'dlq_error', ARGV[6], 'dlq_member_id', ARGV[2], 'dlq_at_ms', string.format('%.0f', now),
}) do
  args[#args + 1] = value
end
local mac = dead_letter_mac(KEYS[3], args, 7) -- over every field and value after XADD's '*'
args[#args + 1] = 'dlq_mac'
args[#args + 1] = mac
local copy = redis.call(unpack(args))
redis.call('XACK', KEYS[2], ARGV[1], id)
return {status, 'DEAD_LETTERED', copy, deliveries}
