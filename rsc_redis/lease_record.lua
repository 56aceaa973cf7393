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

-- How far past Redis's TIME a record's deadline may be and still count: a renewal writes TIME + the
-- group's lease TTL, so a record beyond now + TTL (+ this much for a clock that stepped back in a
-- failover) was not written by renew_lease.lua and is ignored.
local RECORD_SLACK_MS = 1000

-- The lease TTL of `group` (ms) as the metadata holds it: lt:<group>, or, for metadata from before that
-- field, the TTL in the member `tag`'s f: field; nil when neither says (renew_lease.lua then renews
-- nothing, so no record can be valid). Touches: HGET lt:<group>, f:<tag> on `meta`.
local function lease_ttl_of(meta, group, tag)
  local ttl = tonumber(redis.call('HGET', meta, 'lt:' .. group) or '')
  if not ttl and tag then
    local f = redis.call('HGET', meta, 'f:' .. tag)
    if f then
      ttl = tonumber(string.match(f, '^[^|]*|[^|]*|([^|]*)|') or '')
    end
  end
  return ttl
end

-- The deadline the member `tag` (<group>:<member>) renewed its lease to, if its record is valid at `now`,
-- else 0. Valid: "<epoch> <deadline>" in decimal digits (at most 15, so exact as a Lua number), written
-- at `live_epoch` (the m: value; read here, only when a record exists, if nil is given), and a deadline
-- no later than now + the group's lease TTL (+ RECORD_SLACK_MS). A record counts only up to now + TTL.
-- The members' Redis user may write this hash (docs/redis-acl.md), so nothing in it is trusted as
-- written: an unparsable record, one of another epoch or one too far ahead counts as no record.
-- Touches: HGET of the member's field of `records`; HGET m:<tag>, lt:<group> (f:<tag>) on `meta` when
-- needed.
local function renewed_until(meta, records, tag, live_epoch, now)
  local record = redis.call('HGET', records, tag)
  if not record then
    return 0
  end
  local epoch, deadline = string.match(record, '^(%d+) (%d+)$')
  if not epoch or #deadline > 15 or epoch ~= (live_epoch or redis.call('HGET', meta, 'm:' .. tag)) then
    return 0
  end
  deadline = tonumber(deadline)
  if deadline <= now then
    return deadline
  end
  local ttl = lease_ttl_of(meta, string.match(tag, '^([^:]+):'), tag)
  if not ttl or deadline > now + ttl + RECORD_SLACK_MS then
    return 0
  end
  return math.min(deadline, now + ttl)
end
