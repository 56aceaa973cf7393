-- Delete one stream of a RETIRED routing version, but only if every consumer group on it has
-- finished with it: nothing pending and nothing left to deliver. Atomic with the check, so an entry
-- cannot be read (or a pending one claimed) in between. The caller checks the grace period.
--
-- KEYS[1]  rsc:{P}:v<version>:<index>
--
-- "Nothing left to deliver" is asked of the stream: no entry after the group's last-delivered id. Not
-- "last-delivered >= last-generated": an opt-in cap may have trimmed entries the group never read, and
-- then its last-delivered id stays behind the last generated one for ever.
--
-- Returns {1} when deleted (UNLINK: freed in the background), {-1} when the stream does not exist,
-- else {0, group, pending count, last-delivered id, last-generated id} for the first group that still
-- holds it. Touches: EXISTS, XINFO STREAM, XINFO GROUPS, XRANGE (read); UNLINK KEYS[1].
local stream = KEYS[1]
if redis.call('EXISTS', stream) == 0 then
  return {-1}
end

local function field(reply, name)
  for i = 1, #reply, 2 do
    if reply[i] == name then
      return reply[i + 1]
    end
  end
  return nil
end

for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local pending = tonumber(field(info, 'pending'))
  local delivered = field(info, 'last-delivered-id')
  if pending > 0 or redis.call('XRANGE', stream, '(' .. delivered, '+', 'COUNT', 1)[1] then
    local last = field(redis.call('XINFO', 'STREAM', stream), 'last-generated-id')
    return {0, field(info, 'name'), pending, delivered, last}
  end
end
redis.call('UNLINK', stream)
return {1}
