-- Select pending entries of one shard for one group, then either skip them (acknowledge them without
-- handling them, returning what was skipped for the operator's audit record) or only list them: what a
-- skip with the same arguments would acknowledge now. One selection for both, so that "what would be
-- skipped" (the confirmation page) and "what is skipped" cannot differ. docs/protocol.md section 14.
-- Prefixed with operator_checks.lua.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:v<version>:<index>: the shard's stream
-- ARGV[1]  consumer group
-- ARGV[2]  the shard's routing version (decimal)
-- ARGV[3]  action: 'skip' (acknowledge the selection) or 'list' (read only)
-- ARGV[4]  mode: 'ids', 'older' or 'oldest'
-- ARGV[5]  limit: at most this many entries are selected ('ids' lists at most that many)
-- ARGV[6..] mode 'ids': the entry ids (distinct, canonical); mode 'older': ARGV[6] = older_than_ms
--
-- Selection. 'ids': the listed ids that are pending for the group (for any consumer), in the listed
-- order; a skip is all or nothing: one id not pending and nothing is acknowledged. 'older': the oldest
-- pending entries whose id's ms part is at most Redis TIME - older_than_ms (their age by the id, the
-- clock entry ids are made from), up to the limit. 'oldest': the oldest pending entries, up to the limit.
-- Field values are cut to 16384 bytes: the store keeps at most 4096 characters of each (a character
-- is at most 4 bytes in UTF-8), and a reply of 1000 entries stays bounded whatever they hold.
--
-- Returns
--   {'OK', entries, not_pending, now_ms}  entries: {{id, consumer, idle ms, deliveries, fields}, ...};
--                      fields is {field, value, ...}, or false for an entry deleted from the stream
--                      (trimmed) while pending. 'skip': they were acknowledged and not_pending is
--                      empty. 'list': nothing changed; not_pending holds the listed ids not pending.
--   {'NO_GROUP'}       the group does not exist (metadata); or, to a skip, it has no Redis consumer
--                      group on the stream (a list then finds nothing pending)
--   {'RETIRED'}        the shard's version is neither ACTIVE nor DRAINING any more
--   {'NOT_PENDING', {id, ...}}  skip, mode 'ids': these ids are not pending; nothing acknowledged
-- Touches: HEXISTS g:<group>, HGET route, TIME; XPENDING, XRANGE (read) and, to a skip that is OK,
-- XACK on KEYS[2].
local MAX_VALUE_BYTES = 16384
local group, action, mode, limit = ARGV[1], ARGV[3], ARGV[4], tonumber(ARGV[5])
if not group_exists(KEYS[1], group) then
  return {'NO_GROUP'}
end
if not version_is_live(KEYS[1], ARGV[2]) then
  return {'RETIRED'}
end
local now = now_ms()
local listed = {}
if mode == 'ids' then
  for i = 6, #ARGV do
    listed[#listed + 1] = ARGV[i]
  end
end
local summary = redis.pcall('XPENDING', KEYS[2], group)
if type(summary) == 'table' and summary.err then
  if action == 'skip' then
    return {'NO_GROUP'}
  end
  return {'OK', {}, listed, now}  -- released from a drain, say: nothing can be pending
end

local pending = {}
local missing = {}
if mode == 'ids' then
  for _, id in ipairs(listed) do
    local row = redis.call('XPENDING', KEYS[2], group, id, id, 1)[1]
    if row then
      pending[#pending + 1] = row
    else
      missing[#missing + 1] = id
    end
  end
  if action == 'skip' and #missing > 0 then
    return {'NOT_PENDING', missing}
  end
elseif mode == 'older' then
  local cutoff = tonumber(now) - tonumber(ARGV[6])
  if cutoff >= 0 then
    pending = redis.call('XPENDING', KEYS[2], group, '-', string.format('%.0f', cutoff), limit)
  end
else
  pending = redis.call('XPENDING', KEYS[2], group, '-', '+', limit)
end

local function bounded(flat)
  for i = 2, #flat, 2 do
    if #flat[i] > MAX_VALUE_BYTES then
      flat[i] = string.sub(flat[i], 1, MAX_VALUE_BYTES)
    end
  end
  return flat
end

local entries = {}
local ids = {}
for _, row in ipairs(pending) do
  local entry = redis.call('XRANGE', KEYS[2], row[1], row[1])[1]
  entries[#entries + 1] = {row[1], row[2], row[3], row[4], (entry and bounded(entry[2])) or false}
  ids[#ids + 1] = row[1]
end
if action == 'skip' and #ids > 0 then
  redis.call('XACK', KEYS[2], group, unpack(ids))
end
return {'OK', entries, missing, now}
