-- Append entries as `produce` does (produce.lua), each with an optional idempotency key: an entry whose
-- key was appended within the window is not appended again; its reply is the first append's
-- (docs/producer.md, "Enqueue once"). After produce_route.lua (the route check) and rsc_redis/keys.lua
-- (prefix_key) in the data plane's library (rsc_redis/dataplane/library.py).
--
-- KEYS[1]   rsc:{P}:meta
-- KEYS[2]   rsc:{P}:once        hash: the current generation of the prefix's idempotency keys
-- KEYS[3]   rsc:{P}:once:prev   hash: the previous generation
-- KEYS[4], KEYS[5], ...  the streams of this call, each once, as for produce.lua
-- ARGV[1]   routing version the producer used (decimal)
-- ARGV[2]   shard count the producer used (decimal)
-- ARGV[3]   window_ms: a key is remembered at least this long after its append (unless the cap is reached)
-- ARGV[4]   cap: the most keys the two generations hold (a generation is closed at cap / 2)
-- ARGV[5..] for each stream KEYS[k], k = 4, 5, ... in order: its shard index, the number n of its
--           entries, then n triples: the idempotency key ('' for none), the event_id, the value (the
--           packed envelope, finished, as for produce.lua)
--
-- Returns
--   {'OK', {entry id, ...}, {position, record, ...}}   every entry done, in ARGV order: the entry id it
--        was appended under, or, for an entry whose key was found, the first append's entry id; the
--        third list names those (position: 1-based among the call's entries; record: "<routing version>
--        <shard index> <entry id> <event_id>" of the first append)
--   {'STALE_ROUTE', route}, {'NO_ROUTE'}, {'NO_STREAM'}   as produce.lua: nothing written
--
-- The record of a key: field <key> of either generation, value "<version> <index> <entry id> <event_id>";
-- field '' of the current generation is "<ms it was opened at (Redis TIME)> <records written to it>" (the
-- count, kept in the HSET that writes them, spares an HLEN per call; a record written again over an
-- expired one counts twice, which closes a generation early, never late). A record counts while the
-- entry id's ms (Redis's clock at the append) is less than window_ms ago. The current generation is
-- closed (RENAME over the previous one, which is dropped) when it is window_ms old or holds cap / 2
-- keys; a new one opens with PEXPIRE 2 * window_ms, so both vanish on their own when nothing is sent.
-- Closing by age drops only keys older than the window (the dropped generation closed a window ago);
-- closing at the cap may drop younger ones: past the cap the window shortens (docs/producer.md).
-- The scope of a key is the stream prefix, not a shard or a routing version: a retry that a resharding
-- routes to another version's shard still finds the first append's record.
-- Touches: HGET route, EXISTS (produce_route.lua); TIME; HMGET on KEYS[2] and KEYS[3]; XADD NOMKSTREAM
-- per new entry; HSET on KEYS[2] when a keyed entry was appended, with RENAME to KEYS[3] and PEXPIRE of
-- KEYS[2] when that opens a new generation.
local refused, sizes = produce_route(KEYS, ARGV, 4, 5, 3)
if refused then
  return refused
end
local meta, current, previous = KEYS[1], KEYS[2], KEYS[3]
if current ~= prefix_key(meta, 'once') or previous ~= prefix_key(meta, 'once:prev') then
  error({err = 'ERR idempotent_produce: KEYS[2..3] are not the idempotency keys of ' .. meta})
end
local window, cap = tonumber(ARGV[3]), tonumber(ARGV[4])
if not window or window < 1 or not cap or cap < 2 then
  error({err = 'ERR idempotent_produce: window_ms and cap must be positive numbers'})
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- The keys of the call, looked up in both generations at once (one HMGET each).
local wanted, w = {''}, 1
local a = 5
for k = 4, #KEYS do
  for i = a + 2, a + 2 + 3 * (sizes[k] - 1), 3 do
    if ARGV[i] ~= '' then
      w = w + 1
      wanted[w] = ARGV[i]
    end
  end
  a = a + 2 + 3 * sizes[k]
end
local seen = {}
local function remember(found, from)
  for j = from, w do
    local record = found[j - from + 1]
    if record and not seen[wanted[j]] then
      local ms = tonumber(string.match(record, '^%d+ %d+ (%d+)%-'))
      if ms and now - ms < window then
        seen[wanted[j]] = record
      end
    end
  end
end
local opened, written = nil, 0
if w > 1 then
  local found = redis.call('HMGET', current, unpack(wanted, 1, w))
  if found[1] then
    local at, count = string.match(found[1], '^(%d+) (%d+)$')
    opened, written = tonumber(at), tonumber(count)
  end
  table.remove(found, 1)
  remember(found, 2)
  remember(redis.call('HMGET', previous, unpack(wanted, 2, w)), 2)
end

-- The appends, in ARGV order; a key found (or appended earlier in this call) appends nothing.
local ids, duplicates, records = {}, {}, {}
local n, d, r = 0, 0, 0
a = 5
for k = 4, #KEYS do
  local stream, index = KEYS[k], ARGV[a]
  for i = a + 2, a + 2 + 3 * (sizes[k] - 1), 3 do
    local key = ARGV[i]
    local record = key ~= '' and seen[key]
    n = n + 1
    if record then
      ids[n] = string.match(record, '^%d+ %d+ (%S+)')
      duplicates[d + 1], duplicates[d + 2] = n, record
      d = d + 2
    else
      local id = redis.call('XADD', stream, 'NOMKSTREAM', '*', 'envelope', ARGV[i + 2])
      if not id then
        return {'NO_STREAM'} -- only the first XADD of a one-stream call: nothing written
      end
      ids[n] = id
      if key ~= '' then
        record = ARGV[1] .. ' ' .. index .. ' ' .. id .. ' ' .. ARGV[i + 1]
        seen[key] = record
        records[r + 1], records[r + 2] = key, record
        r = r + 2
      end
    end
  end
  a = a + 2 + 3 * sizes[k]
end

-- Record the new keys, in a new generation when the current one is a window old or full.
if r > 0 then
  if not opened or now - opened >= window or written >= cap / 2 then
    if opened then
      redis.call('RENAME', current, previous)
    end
    redis.call('HSET', current, '', now .. ' ' .. r / 2, unpack(records, 1, r))
    redis.call('PEXPIRE', current, 2 * window)
  else
    redis.call('HSET', current, '', opened .. ' ' .. (written + r / 2), unpack(records, 1, r))
  end
end
return {'OK', ids, duplicates}
