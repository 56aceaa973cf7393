-- Delete a stream prefix: its metadata key, if the topology is still the one the caller decided on,
-- together with every stream, dead-letter stream and redeliver hash of it, atomically (one hash tag).
--
-- KEYS[1]        rsc:{P}:meta
-- KEYS[2..n+1]   the streams to count (every version's shard streams, then the groups' dead letters)
-- KEYS[n+2..]    other keys of the prefix to delete (the groups' redeliver hashes)
-- ARGV[1]        the topology revision (t#) the caller loaded
-- ARGV[2]        n, the number of streams after KEYS[1]
-- ARGV[3]        "1": refuse if those streams hold any entry (deletion not forced), else "0"
--
-- Returns {1, keys deleted}; {0, entries} when refused because the streams hold entries (nothing
-- deleted); {-1} when the topology revision changed (a conflict: nothing deleted). UNLINK frees large
-- streams in the background. Touches: HGET t#, XLEN (read); UNLINK every key given.
local meta = KEYS[1]
if (redis.call('HGET', meta, 't#') or '') ~= ARGV[1] then
  return {-1}
end
local streams = tonumber(ARGV[2])
if ARGV[3] == '1' then
  local entries = 0
  for i = 2, streams + 1 do
    if redis.call('TYPE', KEYS[i])['ok'] == 'stream' then
      entries = entries + redis.call('XLEN', KEYS[i])
    end
  end
  if entries > 0 then
    return {0, entries}
  end
end
local deleted = 0
for i = 1, #KEYS do
  deleted = deleted + redis.call('UNLINK', KEYS[i])
end
return {1, deleted}
