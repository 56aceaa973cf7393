-- Ask the owner of one shard to re-read its pending entries now (docs/protocol.md section 14): bump the
-- shard's counter in the group's redeliver hash. The owner's fenced reads return the counter
-- (read_new.lua); a value different from the one it first saw makes it re-read its own pending entries
-- before anything new. Prefixed with operator_checks.lua.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:rd:<group>
-- ARGV[1]  consumer group   ARGV[2]  shard wire form (v<version>:<index>)   ARGV[3]  its version
--
-- Returns {'OK', new counter} | {'NO_GROUP'} (the group does not exist) | {'RETIRED'} (the shard's
-- version is neither ACTIVE nor DRAINING). Checked in one script so that a group deleted meanwhile
-- leaves no counter behind.
-- Touches: HEXISTS g:<group>, HGET route (read); only when OK: HINCRBY on KEYS[2].
if not group_exists(KEYS[1], ARGV[1]) then
  return {'NO_GROUP'}
end
if not version_is_live(KEYS[1], ARGV[3]) then
  return {'RETIRED'}
end
return {'OK', redis.call('HINCRBY', KEYS[2], ARGV[2], 1)}
