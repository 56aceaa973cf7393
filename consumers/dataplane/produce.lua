-- Append entries to one shard of the ACTIVE routing version, never to a sealed one (docs/producer.md).
-- Not fenced by a member: a producer is not a member. Instead the route the producer computed the
-- stream key from is checked against the `route` field, atomically with the appends.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:v<version>:<index>: the stream the producer routed these entries to
-- ARGV[1]  routing version the producer used (decimal)
-- ARGV[2]  shard count the producer used (decimal)
-- ARGV[3]  shard index (decimal)
-- ARGV[4..] five values per entry: event_id, partition_key, content_type, payload, headers (JSON)
--
-- Returns
--   {'OK', {entry id, ...}}     every entry appended, in order, with routing_version = ARGV[1] and
--                               produced_at_ms = Redis TIME (ms), the same for all entries of the call
--   {'STALE_ROUTE', route}      ARGV[1..2] are not the active version: nothing appended; `route` is the
--                               current "<active> <shard count> <draining>" to recompute from
--   {'NO_ROUTE'}                the stream prefix does not exist: nothing appended
--   {'NO_STREAM'}               the route is current but the stream is missing: nothing appended
-- Raises a script error if KEYS[2] is not the key of shard ARGV[3] of version ARGV[1] under KEYS[1].
-- Touches: HGET route; EXISTS and XADD on KEYS[2]; TIME.
local route = redis.call('HGET', KEYS[1], 'route')
if not route then
  return {'NO_ROUTE'}
end
local active, count = string.match(route, '^(%d+) (%d+)')
if active ~= ARGV[1] or count ~= ARGV[2] then
  return {'STALE_ROUTE', route}
end
local index = tonumber(ARGV[3])
if KEYS[2] ~= string.sub(KEYS[1], 1, -5) .. 'v' .. active .. ':' .. ARGV[3] or index >= tonumber(count) then
  error({err = 'ERR stream key ' .. KEYS[2] .. ' is not shard ' .. ARGV[3] .. ' of version ' .. active})
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {'NO_STREAM'}
end
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local ids = {}
for i = 4, #ARGV, 5 do
  ids[#ids + 1] = redis.call('XADD', KEYS[2], '*',
    'event_id', ARGV[i], 'partition_key', ARGV[i + 1], 'routing_version', active,
    'produced_at_ms', now, 'content_type', ARGV[i + 2], 'payload', ARGV[i + 3], 'headers', ARGV[i + 4])
end
return {'OK', ids}
