-- The members' own lease renewals (docs/protocol.md section 5): one rule for every script that reads
-- a lease. Not a script on its own: rsc_redis/lua.py puts it, after keys.lua (prefix_key), in front of
-- load.lua, fast_heartbeat.lua, commit.lua and tick_due.lua (coordinator/store/redis_store.py) and of
-- fence.lua's scripts and renew_lease.lua (consumers/dataplane/scripts.py).
--
-- rsc:{P}:lr is a hash, field <group>:<member> = "<member epoch> <deadline ms>". A member's lease is the
-- later of its l: field and its record, and a record counts only at the epoch the member is live at
-- (its m: field).

-- Raise a script error unless `key` is the key `rsc:{P}:<suffix>` of `meta` (rsc:{P}:meta), named `what`
-- in the error.
local function require_key_of(meta, key, suffix, what)
  if key ~= prefix_key(meta, suffix) then
    error({err = 'ERR key ' .. tostring(key) .. ' is not the ' .. what .. ' of ' .. meta})
  end
  return key
end

-- The members' own renewals (rsc:{P}:lr).
local function require_lease_records_key(meta, key)
  return require_key_of(meta, key, 'lr', 'lease-renewal key')
end

-- The lease index (rsc:{P}:lz): a sorted set of the live members, <group>:<member> scored by their l:
-- deadline (docs/store.md).
local function require_lease_index_key(meta, key)
  return require_key_of(meta, key, 'lz', 'lease index')
end

-- The schedule index (rsc:{P}:sz): live members, <group>:<member> scored by when a tick must next look at
-- their revocation (docs/store.md, "The tick index").
local function require_schedule_index_key(meta, key)
  return require_key_of(meta, key, 'sz', 'schedule index')
end

-- The deadline the member `tag` (<group>:<member>) renewed its lease to, if its record was written at
-- `live_epoch` (the m: value; read here, only when a record exists, if nil is given), else 0.
-- Touches: HGET of the member's field of `records`; HGET m:<tag> on `meta` when needed.
local function renewed_until(meta, records, tag, live_epoch)
  local record = redis.call('HGET', records, tag)
  if not record then
    return 0
  end
  local epoch, deadline = string.match(record, '^(%d+) (%d+)$')
  if not epoch or epoch ~= (live_epoch or redis.call('HGET', meta, 'm:' .. tag)) then
    return 0
  end
  return tonumber(deadline)
end
