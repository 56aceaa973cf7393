-- Delete listed dead letters from a group's dead-letter stream, all or nothing (docs/protocol.md
-- section 14). Purging the whole stream is a plain DEL and needs no script. Prefixed with
-- operator_checks.lua.
--
-- KEYS[1]  rsc:{P}:meta    KEYS[2]  rsc:{P}:dlq:<group>
-- ARGV[1]  consumer group  ARGV[2..] dead-letter ids (distinct)
--
-- Returns {'OK', deleted count} | {'NO_GROUP'} | {'NOT_FOUND', {id, ...}} (nothing deleted).
-- Touches: HEXISTS g:<group>; XRANGE on KEYS[2]; only when OK: XDEL on KEYS[2].
if not group_exists(KEYS[1], ARGV[1]) then
  return {'NO_GROUP'}
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
