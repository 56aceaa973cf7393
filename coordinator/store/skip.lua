-- Skip pending entries of one shard for one group: acknowledge them without handling them, returning
-- what was skipped (the operator's audit record keeps it). docs/protocol.md section 14.
-- Prefixed with operator_checks.lua.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:v<version>:<index>: the shard's stream
-- ARGV[1]  consumer group
-- ARGV[2]  the shard's routing version (decimal)
-- ARGV[3]  mode: 'ids' or 'older'
-- ARGV[4]  limit: at most this many entries are skipped (mode 'older'; 'ids' lists at most that many)
-- ARGV[5..] mode 'ids': the entry ids (distinct); mode 'older': ARGV[5] = older_than_ms (decimal)
--
-- Mode 'ids' is all or nothing: every id must be pending for the group (for any consumer), else nothing
-- is acknowledged. Mode 'older' skips the oldest pending entries whose id's ms part is at most
-- Redis TIME - older_than_ms (their age by the id, the clock entry ids are made from), up to the limit.
--
-- Returns
--   {'OK', {{id, consumer, deliveries, {field, value, ...}}, ...}}  in id order; acknowledged. The field
--                      list is empty for an entry deleted from the stream (trimmed) while pending.
--   {'NO_GROUP'}       the group does not exist (metadata) or has no Redis consumer group on the stream
--   {'RETIRED'}        the shard's version is neither ACTIVE nor DRAINING any more
--   {'NOT_PENDING', {id, ...}}  mode 'ids': these ids are not pending; nothing acknowledged
-- Touches: HEXISTS g:<group>, HGET route, TIME; XPENDING, XRANGE (read) and only when OK: XACK on KEYS[2].
local group = ARGV[1]
if not group_exists(KEYS[1], group) then
  return {'NO_GROUP'}
end
if not version_is_live(KEYS[1], ARGV[2]) then
  return {'RETIRED'}
end
local summary = redis.pcall('XPENDING', KEYS[2], group)
if type(summary) == 'table' and summary.err then
  return {'NO_GROUP'}
end

local pending = {}
if ARGV[3] == 'ids' then
  local missing = {}
  for i = 5, #ARGV do
    local row = redis.call('XPENDING', KEYS[2], group, ARGV[i], ARGV[i], 1)[1]
    if row then
      pending[#pending + 1] = row
    else
      missing[#missing + 1] = ARGV[i]
    end
  end
  if #missing > 0 then
    return {'NOT_PENDING', missing}
  end
else
  local cutoff = tonumber(now_ms()) - tonumber(ARGV[5])
  if cutoff >= 0 then
    pending = redis.call('XPENDING', KEYS[2], group, '-', string.format('%.0f', cutoff), tonumber(ARGV[4]))
  end
end

local skipped = {}
local ids = {}
for _, row in ipairs(pending) do
  local entry = redis.call('XRANGE', KEYS[2], row[1], row[1])[1]
  skipped[#skipped + 1] = {row[1], row[2], row[4], (entry and entry[2]) or {}}
  ids[#ids + 1] = row[1]
end
if #ids > 0 then
  redis.call('XACK', KEYS[2], group, unpack(ids))
end
return {'OK', skipped}
