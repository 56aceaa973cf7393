-- Append entries to shards of the ACTIVE routing version, never to a sealed one (docs/producer.md).
-- Not fenced by a member: a producer is not a member. Instead the route the producer computed the
-- stream keys from is checked against the `route` field, atomically with the appends.
-- After produce_route.lua (the route check, shared with idempotent_produce.lua) in the data plane's
-- library (rsc_redis/dataplane/library.py).
--
-- KEYS[1]   rsc:{P}:meta
-- KEYS[2], KEYS[3], ...  the streams of this call, each once: rsc:{P}:v<version>:<index> as routed
-- ARGV[1]   routing version the producer used (decimal)
-- ARGV[2]   shard count the producer used (decimal)
-- ARGV[3..] for each stream KEYS[k], k = 2, 3, ... in order: its shard index (decimal), the number n of
--           its entries, then n values, one per entry: its packed envelope, finished
--           ("<ARGV[1]> 0 <4 lengths>\n<event_id><partition_key><content_type><headers><payload>",
--           coordinator/protocol/envelope.py: produced_at_ms 0, the entry id's ms is that time).
--           A single send is KEYS = {meta, stream}, ARGV = {v, count, index, 1, value}.
--
-- Returns
--   {'OK', {entry id, ...}}     every entry appended, in ARGV order, as one field, envelope = its value
--   {'STALE_ROUTE', route}      ARGV[1..2] are not the active version: nothing appended; `route` is the
--                               current "<active> <shard count> <draining>" to recompute from
--   {'NO_ROUTE'}                the stream prefix does not exist: nothing appended
--   {'NO_STREAM'}               the route is current but a stream of the call is missing: nothing appended
-- Raises a script error, before appending anything, if a KEYS[k] is not the key of the shard index
-- given for it under KEYS[1] and the active version, if that index is not below the shard count, or if
-- ARGV does not match KEYS (produce_route.lua).
-- Touches: HGET route; XADD NOMKSTREAM on KEYS[2], ...; EXISTS on them when there are several.
--
-- Lean on purpose (every redis.call costs a few microseconds of server time, about what a plain XADD
-- costs): one HGET per call, then per entry nothing but its XADD of one field, the value as it came (no
-- string is built in Lua; the route check, per call and per stream, is all this adds to a pipeline of
-- XADDs). A missing stream is found by XADD's NOMKSTREAM (it appends nothing and returns nil) when the
-- call has one stream, so the steady-state single send needs no EXISTS; a call with several streams
-- checks them all first, in one EXISTS, so that it is refused whole or not at all. The values are not
-- looked into: the routing version in them is the producer's, as the partition key is (the call was
-- checked against ARGV[1], which the producer writes into each value).
local refused, sizes = produce_route(KEYS, ARGV, 2, 3, 1)
if refused then
  return refused
end
local ids = {}
local n = 0
local a = 3
for k = 2, #KEYS do
  local key = KEYS[k]
  local after = a + 2 + sizes[k]
  for i = a + 2, after - 1 do
    local id = redis.call('XADD', key, 'NOMKSTREAM', '*', 'envelope', ARGV[i])
    if not id then
      return {'NO_STREAM'} -- only the first XADD of a one-stream call can get here: nothing appended
    end
    n = n + 1
    ids[n] = id
  end
  a = after
end
return {'OK', ids}
