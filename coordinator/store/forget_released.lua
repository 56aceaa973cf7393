-- Destroy a group's Redis consumer groups on shards it was released from (release from a migration's
-- drain, docs/protocol.md section 14), but only where the group, as it is NOW, will never read them:
-- the shard is in its document's drained set, or its version is no longer live (retired). Run after the
-- release's commit, so the group may have been deleted and created again in between: a new group of
-- the same name that must still drain the shard keeps its consumer group there. Prefixed with
-- operator_checks.lua.
--
-- KEYS[1]      rsc:{P}:meta
-- KEYS[2..]    the released shards' streams, rsc:{P}:v<version>:<index>, in ARGV order
-- ARGV[1]      consumer group
-- ARGV[2..]    per stream: its shard's wire form "v<version>:<index>"
--
-- Returns the number of consumer groups destroyed (0 when the group no longer exists: deleting it
-- destroyed them already). Touches: HGET g:<group>, HGET route (read); XGROUP DESTROY on KEYS[2..].
local doc = redis.call('HGET', KEYS[1], 'g:' .. ARGV[1])
if not doc then
  return 0
end
local drained = {}
for _, shard in ipairs(cjson.decode(doc)['drained'] or {}) do
  drained[shard] = true
end
local destroyed = 0
for i = 2, #KEYS do
  local shard = ARGV[i]
  local version = string.match(shard, '^v(%d+):%d+$')
  if drained[shard] or not version_is_live(KEYS[1], version) then
    local reply = redis.pcall('XGROUP', 'DESTROY', KEYS[i], ARGV[1])
    if type(reply) == 'number' then
      destroyed = destroyed + reply
    end
  end
end
return destroyed
