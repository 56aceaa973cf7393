-- Sweep the members' own lease renewals of one stream prefix (rsc:{P}:lr): delete every record that
-- does not count (docs/protocol.md section 5): unparsable, of a member that is not live or at another
-- epoch than its live one, too far ahead (not written by renew_lease.lua), or past. Valid records stay.
-- The members' Redis user may write this hash, so fields that no script wrote may be in it: the tick
-- removes them a batch at a time, so that the hash stays as small as the members renewing.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:lr
-- ARGV[1]  the HSCAN cursor to go on from ("0": from the start)
-- ARGV[2]  how many fields to look at (HSCAN's COUNT)
--
-- Returns {next cursor ("0": the sweep went round), invalid fields deleted, past records deleted}.
-- Touches: HLEN, HSCAN, HDEL on KEYS[2]; HGET m:/lt:/f: on KEYS[1].
local meta = KEYS[1]
local records = require_lease_records_key(meta, KEYS[2])
if redis.call('HLEN', records) == 0 then
  return {'0', 0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local scanned = redis.call('HSCAN', records, ARGV[1], 'COUNT', tonumber(ARGV[2]))
local fields = scanned[2]
local invalid, past = 0, 0
for j = 1, #fields, 2 do
  local tag = fields[j]
  local until_ms = 0
  if string.match(tag, '^[^:]+:[^:]+$') then
    until_ms = renewed_until(meta, records, tag, nil, now)
  end
  if until_ms <= 0 then
    redis.call('HDEL', records, tag)
    invalid = invalid + 1
  elseif until_ms <= now then
    redis.call('HDEL', records, tag)
    past = past + 1
  end
end
return {scanned[1], invalid, past}
