-- The route check of a producer's call (docs/producer.md, "Routing"): shared by `produce` (produce.lua)
-- and `idempotent_produce` (idempotent_produce.lua), written once at the top of the data plane's library
-- (rsc_redis/dataplane/library.py), after rsc_redis/keys.lua (stream_key_of).
--
-- produce_route(KEYS, ARGV, first, a, stride): KEYS[1] is rsc:{P}:meta, KEYS[first..] the call's streams;
-- ARGV[1..2] the routing version and shard count the producer used; from ARGV[a] on, per stream: its
-- shard index, its entry count n, then n * `stride` arguments.
-- Returns nil and the entry count per stream (indexed like KEYS) when the call may append; else the
-- refusal to return as it is, nothing written: {'NO_ROUTE'}, {'STALE_ROUTE', route} or {'NO_STREAM'} (a
-- call with several streams checks them all with one EXISTS; a one-stream call leaves that to XADD's
-- NOMKSTREAM). Raises a script error, before anything is written, if a stream key is not the key of the
-- index given for it under the active version, if an index is not below the shard count, or if ARGV
-- does not match KEYS.
-- Touches: HGET route on KEYS[1]; EXISTS on the streams when there are several.
local function produce_route(KEYS, ARGV, first, a, stride)
  local route = redis.call('HGET', KEYS[1], 'route')
  if not route then
    return {'NO_ROUTE'}
  end
  local active, count = string.match(route, '^(%d+) (%d+)')
  if active ~= ARGV[1] or count ~= ARGV[2] then
    return {'STALE_ROUTE', route}
  end
  local shards = tonumber(count)
  local sizes = {}
  for k = first, #KEYS do
    local index, size = ARGV[a], tonumber(ARGV[a + 1])
    local shard = 'v' .. active .. ':' .. tostring(index)
    if not size or KEYS[k] ~= stream_key_of(KEYS[1], shard) or tonumber(index) >= shards then
      error({err = 'ERR stream key ' .. KEYS[k] .. ' is not shard ' .. tostring(index) .. ' of version ' .. active})
    end
    sizes[k] = size
    a = a + 2 + stride * size
  end
  if a ~= #ARGV + 1 then
    error({err = 'ERR produce: ARGV does not match KEYS (see the layout in the header of its .lua file)'})
  end
  if #KEYS > first and redis.call('EXISTS', unpack(KEYS, first)) ~= #KEYS - first + 1 then
    return {'NO_STREAM'}
  end
  return nil, sizes
end
