-- Delete dead letters from a group's dead-letter stream: the listed ones, all or nothing, or every one
-- of them (docs/protocol.md section 14). The group is checked in the same script, like every operator
-- action; purging everything is one UNLINK (a capped stream of ~100,000 entries is freed in the
-- background instead of blocking Redis). Prefixed with operator_checks.lua.
--
-- KEYS[1]  rsc:{P}:meta    KEYS[2]  rsc:{P}:dlq:<group>
-- ARGV[1]  consumer group  ARGV[2..] dead-letter ids (distinct); none: every dead letter
--
-- Returns {'OK', deleted count} | {'NO_GROUP'} | {'NOT_FOUND', {id, ...}} (nothing deleted).
-- Touches: HEXISTS g:<group>; XLEN, XRANGE on KEYS[2]; only when OK: XDEL or UNLINK (the whole stream,
-- up to ~100,000 entries, freed in the background) on KEYS[2].
if not group_exists(KEYS[1], ARGV[1]) then
  return {'NO_GROUP'}
end
if #ARGV == 1 then
  local length = redis.call('XLEN', KEYS[2])
  redis.call('UNLINK', KEYS[2])
  return {'OK', length}
end
local missing = {}
local ids = {}
for i = 2, #ARGV do
  if redis.call('XRANGE', KEYS[2], ARGV[i], ARGV[i])[1] then
    ids[#ids + 1] = ARGV[i]
  else
    missing[#missing + 1] = ARGV[i]
  end
end
if #missing > 0 then
  return {'NOT_FOUND', missing}
end
return {'OK', redis.call('XDEL', KEYS[2], unpack(ids))}
