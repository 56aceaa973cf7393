-- Replay dead letters: append each one's original event to the ACTIVE routing version and delete it from
-- the group's dead-letter stream, all in one script (docs/protocol.md section 14).
-- Prefixed with rsc_redis/keys.lua (stream_key_of) and operator_checks.lua.
--
-- Like produce.lua, the store routes each entry's partition_key itself (murmur2, Lua has none) and passes
-- the version and shard count it used; they are compared with the `route` field here, atomically with
-- the appends, so a replay can never land in a sealed (draining) version.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:dlq:<group>
-- KEYS[3..] the target stream of each dead letter, in ARGV order: rsc:{P}:v<version>:<index>
-- ARGV[1]  consumer group
-- ARGV[2]  routing version the store routed with (decimal)
-- ARGV[3]  shard count the store routed with (decimal)
-- ARGV[4..] two values per dead letter: its id in KEYS[2], the target shard index (decimal)
--
-- Each replayed entry gets the original envelope, with routing_version = ARGV[2] and produced_at_ms =
-- Redis TIME (both set anew) and everything else kept (event_id too, so handlers can de-duplicate): a
-- dead letter of a packed envelope (field `envelope`, coordinator/protocol/envelope.py) is appended as
-- one field `envelope`, its first two numbers replaced; one of an entry written before that layout gets
-- the seven fields present in it, in their order: event_id, partition_key, routing_version,
-- produced_at_ms, content_type, payload, headers. Other fields (the dlq_* bookkeeping, anything
-- foreign) are not copied.
--
-- Returns
--   {'OK', {new entry id, ...}}  every dead letter appended (in ARGV order) and deleted from KEYS[2]
--   {'NO_ROUTE'}                 the stream prefix does not exist: nothing done
--   {'NO_GROUP'}                 the group does not exist: nothing done
--   {'STALE_ROUTE', route}       ARGV[2..3] are not the active version: nothing done; route the
--                                entries again with the returned "<active> <count> <draining>"
--   {'NOT_FOUND', {id, ...}}     these dead letters do not exist: nothing done
--   {'NO_STREAM', key}           a target stream is missing: nothing done
-- Raises a script error if a KEYS[i] is not the key of its shard index of version ARGV[2].
-- Touches: HGET route, HEXISTS g:<group>, TIME; XRANGE on KEYS[2]; only when OK: XADD on KEYS[3..],
-- XDEL on KEYS[2].
local route = redis.call('HGET', KEYS[1], 'route')
if not route then
  return {'NO_ROUTE'}
end
if not group_exists(KEYS[1], ARGV[1]) then
  return {'NO_GROUP'}
end
local active, count = string.match(route, '^(%d+) (%d+)')
if active ~= ARGV[2] or count ~= ARGV[3] then
  return {'STALE_ROUTE', route}
end
local envelope = {'event_id', 'partition_key', 'content_type', 'payload', 'headers'}
local wanted = {event_id = true, partition_key = true, content_type = true, payload = true, headers = true,
  envelope = true}

local letters = {}
local missing = {}
for i = 4, #ARGV, 2 do
  local key = KEYS[3 + (i - 4) / 2]
  local shard = 'v' .. active .. ':' .. ARGV[i + 1]
  if key ~= stream_key_of(KEYS[1], shard) or tonumber(ARGV[i + 1]) >= tonumber(count) then
    error({err = 'ERR stream key ' .. key .. ' is not shard ' .. ARGV[i + 1] .. ' of version ' .. active})
  end
  local entry = redis.call('XRANGE', KEYS[2], ARGV[i], ARGV[i])[1]
  if not entry then
    missing[#missing + 1] = ARGV[i]
  else
    -- The original fields come first in a dead letter: the first occurrence of a name is the original.
    local fields = {}
    local flat = entry[2]
    for j = 1, #flat, 2 do
      if wanted[flat[j]] and fields[flat[j]] == nil then
        fields[flat[j]] = flat[j + 1]
      end
    end
    letters[#letters + 1] = {ARGV[i], key, fields}
  end
end
if #missing > 0 then
  return {'NOT_FOUND', missing}
end
for _, letter in ipairs(letters) do
  if redis.call('EXISTS', letter[2]) == 0 then
    return {'NO_STREAM', letter[2]}
  end
end

local now = now_ms()
local ids = {}
for _, letter in ipairs(letters) do
  local fields = letter[3]
  local args = {}
  local packed = fields.envelope
  if packed then
    -- "<routing version> <produced_at_ms> <the rest>": the rest starts after the second space
    local second = string.find(packed, ' ', (string.find(packed, ' ', 1, true) or #packed) + 1, true)
    args = {'envelope', active .. ' ' .. now .. ' ' .. string.sub(packed, (second or #packed) + 1)}
  else
    for _, name in ipairs(envelope) do
      if fields[name] ~= nil then
        args[#args + 1] = name
        args[#args + 1] = fields[name]
      end
      if name == 'partition_key' then
        args[#args + 1] = 'routing_version'
        args[#args + 1] = active
        args[#args + 1] = 'produced_at_ms'
        args[#args + 1] = now
      end
    end
  end
  ids[#ids + 1] = redis.call('XADD', letter[2], '*', unpack(args))
  redis.call('XDEL', KEYS[2], letter[1])
end
return {'OK', ids}
