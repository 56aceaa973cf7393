-- The fence: shared prelude of every fenced data-plane script (docs/protocol.md section 7).
--
-- Not a function on its own: rsc_redis/dataplane/library.py puts this text once into the data plane's
-- Redis Functions library (after rsc_redis/keys.lua and rsc_redis/lease_record.lua, whose helpers it
-- uses), in front of the functions made of fetch.lua, read_new.lua, read_pending.lua, claim.lua,
-- ack.lua, delete_ghosts.lua and dead_letter.lua, so every one of them decides, inside Redis and before
-- it touches the stream, whether the caller may act. fence() reads the three fields it needs with one HMGET and is made of require_shard_key(),
-- member_epoch_of() (checks 1-2), owner_status() (3-4) and mode_status() (5); fetch.lua calls them
-- itself, with one HMGET of the member's fields and every shard's owner field. After
-- fence() come the helpers those scripts share: call_chunked(), require_group_key() and
-- redeliver_token().
--
-- Every fenced script's last key, KEYS[#KEYS], is rsc:{P}:lr (checked): the members' own lease renewals
-- (docs/protocol.md section 5); the script hands it to fence() (`records`): a function of a library
-- sees only the keys it is given, no global KEYS. A member's lease is the later of its l: field and its record there,
-- "<epoch> <until ms>", when that record was written at the member's live epoch; the record is read
-- only when the l: field has ended, so the steady state reads nothing more.
--
-- fence(meta, stream, group, member, epoch, shard, op, records)
--   meta    KEYS[1] of the caller: rsc:{P}:meta
--   stream  KEYS[2] of the caller: rsc:{P}:<shard>, checked to be exactly that shard's stream key
--   group   the consumer group (also the Redis consumer group's name)
--   member  the member id (also the Redis consumer's name)
--   epoch   the member epoch the caller presents (decimal)
--   shard   the shard in wire form, v<version>:<index>
--   op      'read' (reads, claims, ghost deletion: shard must be R) or 'ack' (acks, dead letters: R, B or V)
--   records KEYS[#KEYS] of the caller: rsc:{P}:lr, checked
-- Returns 'OK', 'MEMBER_FENCED', 'NOT_OWNER', 'STALE_EPOCH' or 'NOT_READABLE', checked in this order:
--   1. m:<group>:<member> absent (member not live)                              -> MEMBER_FENCED
--   2. lease (l:<group>:<member>, or the member's own renewal) <= Redis TIME in ms
--      (lease ended, even before a tick)                                         -> MEMBER_FENCED
--   3. o:<group>:<shard> absent, or its owner is someone else                   -> NOT_OWNER
--   4. epoch outside [shard assignment epoch, member epoch]                      -> STALE_EPOCH
--   5. op 'read' and mode B (held back by strict ordering)                       -> NOT_READABLE
--      op 'read' and mode V (being revoked: ack only)                            -> NOT_OWNER
-- Raises a script error if the stream key is not the shard's, the last key is not rsc:{P}:lr, or a
-- metadata field is malformed.
-- Touches (read only): HMGET m:<group>:<member> l:<group>:<member> o:<group>:<shard>; TIME; HGET of the
-- member's record in rsc:{P}:lr when the l: field has ended.
local function require_shard_key(meta, stream, shard)
  if stream ~= stream_key_of(meta, shard) then
    error({err = 'ERR stream key ' .. stream .. ' is not the key of shard ' .. shard .. ' under ' .. meta})
  end
end

-- Checks 1-2 for the member `tag` (<group>:<member>), given the values of its m: and l: fields (false
-- when absent): the member's epoch (a number) while it is live and its lease has not ended by Redis's
-- TIME, else nil (MEMBER_FENCED). Past the l: field, the member's own renewal record in `records`
-- (rsc:{P}:lr, checked) counts if it was written at the live epoch.
local function member_epoch_of(meta, records_key, tag, epoch_field, lease_field)
  local records = require_lease_records_key(meta, records_key)
  if not epoch_field then
    return nil
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(lease_field or '0') <= now and renewed_until(meta, records, tag, epoch_field, now) <= now then
    return nil
  end
  return tonumber(epoch_field)
end

-- Checks 3-4 for one shard of a member that passed checks 1-2, given the value of o:<group>:<shard>
-- (false when absent): 'OK' and the shard's mode (R, B or V), or the refusal ('NOT_OWNER',
-- 'STALE_EPOCH').
local function owner_status(owner, group, member, member_epoch, epoch, shard)
  if not owner then
    return 'NOT_OWNER'
  end
  local who, grant, mode = string.match(owner, '^(%S+) (%d+) ([RBV])$')
  if not who then
    error({err = 'ERR malformed owner field o:' .. group .. ':' .. shard .. ' = ' .. owner})
  end
  if who ~= member then
    return 'NOT_OWNER'
  end
  local presented = tonumber(epoch)
  if presented < tonumber(grant) or presented > member_epoch then
    return 'STALE_EPOCH'
  end
  return 'OK', mode
end

-- Check 5: what `op` may do on a shard in `mode`.
local function mode_status(mode, op)
  if op == 'ack' or mode == 'R' then
    return 'OK'
  end
  if mode == 'B' then
    return 'NOT_READABLE'
  end
  return 'NOT_OWNER'
end

local function fence(meta, stream, group, member, epoch, shard, op, records)
  require_shard_key(meta, stream, shard)
  local tag = group .. ':' .. member
  local fields = redis.call('HMGET', meta, 'm:' .. tag, 'l:' .. tag, 'o:' .. group .. ':' .. shard)
  local member_epoch = member_epoch_of(meta, records, tag, fields[1], fields[2])
  if not member_epoch then
    return 'MEMBER_FENCED'
  end
  local status, mode = owner_status(fields[3], group, member, member_epoch, epoch, shard)
  if status ~= 'OK' then
    return status
  end
  return mode_status(mode, op)
end

-- Run `head..., items[i]...` in chunks, so that no call unpacks more values than Lua's C stack holds.
-- Returns the replies of every chunk, in order.
local function call_chunked(head, items)
  local replies = {}
  for i = 1, #items, 500 do
    local args = {unpack(head)}
    for j = i, math.min(i + 499, #items) do
      args[#args + 1] = items[j]
    end
    replies[#replies + 1] = redis.call(unpack(args))
  end
  return replies
end


-- Raise a script error unless `key` is the group's key of `kind` ('rd', 'dlq') under `meta`: a caller
-- that passed another group's key would read or write that group's data. `what` names it in the error.
local function require_group_key(meta, key, kind, group, what)
  if key ~= group_key_of(meta, kind, group) then
    error({err = 'ERR key ' .. tostring(key) .. ' is not the ' .. what .. ' key of group ' .. group})
  end
end

-- The shard's redeliver token: the counter an operator's "redeliver" bumps in rsc:{P}:rd:<group>
-- (`key`, checked), or '0' when the shard was never asked to redeliver.
local function redeliver_token(meta, key, group, shard)
  require_group_key(meta, key, 'rd', group, 'redeliver')
  return redis.call('HGET', key, shard) or '0'
end
