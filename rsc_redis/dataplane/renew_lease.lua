-- A member renews its own lease, in Redis, while the coordinator's API cannot (it is down, overloaded
-- or unreachable): docs/protocol.md section 5, "Renewing without the coordinator". Renew only: it
-- changes no epoch, assignment or state, and it cannot bring back a lease that has ended.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:lr: the members' own renewals, field <group>:<member> = "<member epoch> <until ms>"
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch the member holds (decimal)
--
-- Returns, checked in this order:
--   {'MEMBER_FENCED'}   the member is not live (m: absent), or its lease has ended by Redis's TIME
--                       (the later of its l: field and its record at the live epoch): rejoin
--   {'STALE_EPOCH'}     the member is live at another epoch than ARGV[3]: only a heartbeat can tell it
--                       which (nothing written)
--   {'NO_LEASE_TTL'}    the metadata holds no lease TTL for the group (neither lt:<group> nor the
--                       member's f: field: metadata from before this script, mid-rebalance): nothing
--                       written; the member relies on the coordinator's heartbeats
--   {'OK', ms}          renewed: the record now says the lease lasts until TIME + ms, unless it
--                       already said later (a lease never moves back). ms is the group's lease TTL, or
--                       less when the member's revocation deadline (rv:) comes first: a renewal never
--                       outlasts it, so the tick's revocation timeout ends the lease the member knows
--   {'MEMBER_FENCED'}   also when that revocation deadline has passed (the tick is about to expire it)
-- Raises a script error if KEYS[2] is not the lease-renewal key of KEYS[1], or ARGV[3] is not a
-- positive decimal.
-- Touches: HMGET m:/l:/f:/rv:<group>:<member> and lt:<group> on KEYS[1] (read); TIME; HGET and HSET of the
-- member's field of KEYS[2]. The member's Redis user needs write access to KEYS[2] and nothing more
-- (docs/redis-acl.md).
local meta = KEYS[1]
local records = require_lease_records_key(meta, KEYS[2])
local group, member, presented = ARGV[1], ARGV[2], ARGV[3]
if not string.match(presented, '^[1-9]%d*$') then
  error({err = 'ERR member epoch ' .. tostring(presented) .. ' is not a positive decimal'})
end
local tag = group .. ':' .. member
local fields = redis.call('HMGET', meta, 'm:' .. tag, 'l:' .. tag, 'lt:' .. group, 'f:' .. tag, 'rv:' .. tag)
local live_epoch = fields[1]
if not live_epoch then
  return {'MEMBER_FENCED'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local renewed = renewed_until(meta, records, tag, live_epoch, now)
if math.max(tonumber(fields[2] or '0'), renewed) <= now then
  return {'MEMBER_FENCED'}
end
if live_epoch ~= presented then
  return {'STALE_EPOCH'}
end
local ttl = tonumber(fields[3] or '')
if not ttl and fields[4] then
  ttl = tonumber(string.match(fields[4], '^[^|]*|[^|]*|([^|]*)|'))
end
if not ttl then
  return {'NO_LEASE_TTL'}
end
local deadline = now + ttl
local revocation = tonumber(fields[5] or '')
if revocation and revocation < deadline then
  deadline = revocation
end
if deadline <= now then
  return {'MEMBER_FENCED'}
end
if deadline > renewed then
  redis.call('HSET', records, tag, presented .. ' ' .. deadline)
end
return {'OK', deadline - now}
