-- Re-read the member's own pending entries of one shard (after a reconnect, a lost reply, a failed
-- handler under the "redeliver" policy, an operator's redeliver, or a restart that kept the member id):
-- a fenced XREADGROUP ... <after id>. After fence.lua in the library.
--
-- KEYS[1]  rsc:{P}:meta                 KEYS[2]  rsc:{P}:<shard>
-- KEYS[3]  rsc:{P}:lr: the members' own lease renewals (the fence's; always the last key)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch   ARGV[4]  shard
-- ARGV[5]  count            ARGV[6]  return entries with an id strictly greater than this ('0-0': all)
--
-- Returns {status} when fenced, else {'OK', {{id, {field, value, ...}}, ...}, {deliveries, ...}} in id
-- order; deliveries[i] is entry i's delivery count after this read (one XPENDING range call per page).
-- Entries deleted from the stream (XDEL / XTRIM) while pending cannot be delivered: they are acked
-- here (as XAUTOCLAIM and XCLAIM do since Redis 7) and skipped, and the scan moves on to fill the page,
-- so a page is short only when nothing more is pending after ARGV[6] (bounded: 64 scans per call).
-- Touches: the fence's fields (read); only when OK: XREADGROUP on KEYS[2] (bumps the delivery counts
-- of the entries returned), XACK of deleted entries, XPENDING of the returned range.
local status = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'read', KEYS[#KEYS])
if status ~= 'OK' then
  return {status}
end
local count = tonumber(ARGV[5])
local after = ARGV[6]
local entries = {}
for _ = 1, 64 do
  local want = count - #entries
  local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', want, 'STREAMS', KEYS[2], after)
  local page = (reply and reply[1][2]) or {}
  local gone = {}
  for _, entry in ipairs(page) do
    if entry[2] then
      entries[#entries + 1] = entry
    else
      gone[#gone + 1] = entry[1]
    end
    after = entry[1]
  end
  if #gone > 0 then
    call_chunked({'XACK', KEYS[2], ARGV[1]}, gone)
  end
  if #entries >= count or #page < want then
    break
  end
end
-- The entries are exactly this consumer's pending entries between the first and the last id (the
-- deleted ones in between were just acked), so one range query gives every count.
local deliveries = {}
if #entries > 0 then
  local counts = {}
  local rows = redis.call('XPENDING', KEYS[2], ARGV[1], entries[1][1], entries[#entries][1], #entries, ARGV[2])
  for _, row in ipairs(rows) do
    counts[row[1]] = row[4]
  end
  for i, entry in ipairs(entries) do
    deliveries[i] = counts[entry[1]] or 1
  end
end
return {status, entries, deliveries}
