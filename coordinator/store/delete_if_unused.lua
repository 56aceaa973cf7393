-- Delete a stream that a losing create_group / change_shard_count created and the committed topology
-- does not use, if it is still unused: no entries and no Redis consumer group.
--
-- KEYS[1]  the stream key (rsc:{P}:v<version>:<index>)
-- ARGV     none
-- Returns  1 if the stream was deleted, 0 if it is absent, holds entries or has a consumer group.
-- Touches  KEYS[1] only.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('TYPE', KEYS[1]).ok ~= 'stream' then
  return 0
end
if redis.call('XLEN', KEYS[1]) > 0 or #redis.call('XINFO', 'GROUPS', KEYS[1]) > 0 then
  return 0
end
return redis.call('DEL', KEYS[1])
