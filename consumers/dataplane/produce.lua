-- Append entries to shards of the ACTIVE routing version, never to a sealed one (docs/producer.md).
-- Not fenced by a member: a producer is not a member. Instead the route the producer computed the
-- stream keys from is checked against the `route` field, atomically with the appends.
--
-- KEYS[1]   rsc:{P}:meta
-- KEYS[2], KEYS[3], ...  the streams of this call, each once: rsc:{P}:v<version>:<index> as routed
-- ARGV[1]   routing version the producer used (decimal)
-- ARGV[2]   shard count the producer used (decimal)
-- ARGV[3..] for each stream KEYS[k], k = 2, 3, ... in order: its shard index (decimal), the number n of
--           its entries, then 5 * n values, five per entry: event_id, partition_key, content_type,
--           payload, headers (JSON). A single send is KEYS = {meta, stream}, ARGV = {v, count, index, 1,
--           five values}.
--
-- Returns
--   {'OK', {entry id, ...}}     every entry appended, in ARGV order, with routing_version = ARGV[1] and
--                               produced_at_ms = Redis TIME (ms), the same for all entries of the call
--   {'STALE_ROUTE', route}      ARGV[1..2] are not the active version: nothing appended; `route` is the
--                               current "<active> <shard count> <draining>" to recompute from
--   {'NO_ROUTE'}                the stream prefix does not exist: nothing appended
--   {'NO_STREAM'}               the route is current but a stream of the call is missing: nothing appended
-- Raises a script error, before appending anything, if a KEYS[k] is not the key of the shard index
-- given for it under KEYS[1] and the active version, if that index is not below the shard count, or if
-- ARGV does not match KEYS.
-- Touches: HGET route; TIME; XADD NOMKSTREAM on KEYS[2], ...; EXISTS on them when there are several.
--
-- Lean on purpose (every redis.call costs a few microseconds of server time, about what a plain XADD
-- costs): one HGET, one TIME, one XADD per entry. A missing stream is found by XADD's NOMKSTREAM (it
-- appends nothing and returns nil) when the call has one stream, so the steady-state single send
-- needs no EXISTS; a call with several streams checks them all first, in one EXISTS, so that it is
-- refused whole or not at all.
local route = redis.call('HGET', KEYS[1], 'route')
if not route then
  return {'NO_ROUTE'}
end
local active, count = string.match(route, '^(%d+) (%d+)')
if active ~= ARGV[1] or count ~= ARGV[2] then
  return {'STALE_ROUTE', route}
end
local shards = tonumber(count)
local base = string.sub(KEYS[1], 1, -5) .. 'v' .. active .. ':'
local sizes = {}
local a = 3
for k = 2, #KEYS do
  local index, size = ARGV[a], tonumber(ARGV[a + 1])
  if not size or KEYS[k] ~= base .. index or tonumber(index) >= shards then
    error({err = 'ERR stream key ' .. KEYS[k] .. ' is not shard ' .. tostring(index) .. ' of version ' .. active})
  end
  sizes[k] = size
  a = a + 2 + 5 * size
end
if a ~= #ARGV + 1 then
  error({err = 'ERR produce.lua: ARGV does not match KEYS (see the layout in its header)'})
end
if #KEYS > 2 and redis.call('EXISTS', unpack(KEYS, 2)) ~= #KEYS - 1 then
  return {'NO_STREAM'}
end
local t = redis.call('TIME')
local now = t[1] .. string.sub('00000' .. t[2], -6, -4) -- seconds .. milliseconds, no number formatting
local ids = {}
a = 3
for k = 2, #KEYS do
  local key = KEYS[k]
  local after = a + 2 + 5 * sizes[k]
  for i = a + 2, after - 1, 5 do
    local id = redis.call('XADD', key, 'NOMKSTREAM', '*', 'event_id', ARGV[i], 'partition_key', ARGV[i + 1],
      'routing_version', active, 'produced_at_ms', now, 'content_type', ARGV[i + 2], 'payload', ARGV[i + 3],
      'headers', ARGV[i + 4])
    if not id then
      return {'NO_STREAM'} -- only the first XADD of a one-stream call can get here: nothing appended
    end
    ids[#ids + 1] = id
  end
  a = after
end
return {'OK', ids}
