-- Which groups of one stream prefix a tick must read now (docs/store.md, "The tick index"): the tick
-- then loads only those, so a prefix where nothing is due costs a few field reads, not its members.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:lr, the members' own lease renewals
-- KEYS[3]  rsc:{P}:lz, the lease index: live members (<group>:<member>) scored by their l: deadline
-- KEYS[4]  rsc:{P}:sz, the schedule index: live members scored by when a tick must next look at their
--          revocation (0: a revocation clock must start or stop; else the revocation deadline)
-- ARGV[1]  the tick's retention of ended members, ms
-- ARGV[2]  the tick's cap on ended members per group
-- ARGV[3]  how many index entries past their deadline to look at (beyond it: every group is due)
--
-- A group is due when (the rule of coordinator.protocol.group.tick_due, on what is stored):
--   * the prefix has draining versions (drains to observe, versions to retire: every group);
--   * it has no ts: field (metadata from before the index: its members may not be indexed);
--   * a member's schedule index entry has come (a revocation deadline, or a revocation clock to start
--     or stop; an entry of a member that is not live is dropped);
--   * its ts: says it keeps more ended members than the cap, or its oldest ended member is past the
--     retention, or its deadline has come: a static member's hold ends (docs/protocol.md section 3),
--     or (format 1 only) a revocation deadline has come or a revocation clock must start or stop;
--   * a live member's lease deadline has come. An index entry past its deadline is first checked: a
--     member that renewed its lease itself (a record at its live epoch) or whose l: moved on is
--     re-indexed at its real deadline, and an entry of a member that is not live is dropped; only a
--     lease that has really ended makes its group due.
--
-- Returns {now ms, 1} when every group is due, {now ms, -1} when the prefix has no metadata, else
-- {now ms, 0, due group names...}.
-- Touches: HGET route, t, ts:<g>, l:/m: of the entries past due; ZRANGEBYSCORE, ZADD, ZREM on KEYS[3];
-- ZRANGEBYSCORE, ZREM on KEYS[4]; HGET on KEYS[2].
local meta = KEYS[1]
local records = require_lease_records_key(meta, KEYS[2])
local index = require_lease_index_key(meta, KEYS[3])
local schedule = require_schedule_index_key(meta, KEYS[4])
local retention, max_ended, look = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local topo = redis.call('HGET', meta, 't')
if not topo then
  return {now, -1}
end
local route = redis.call('HGET', meta, 'route') or ''
if string.match(route, '^%S+ %S+ (%S+)$') ~= '-' then
  return {now, 1}
end
local due = {}
local past = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, look)
for _, tag in ipairs(past) do
  local live_epoch = redis.call('HGET', meta, 'm:' .. tag)
  if not live_epoch then
    redis.call('ZREM', index, tag)
  else
    local lease = math.max(tonumber(redis.call('HGET', meta, 'l:' .. tag) or '0'),
      renewed_until(meta, records, tag, live_epoch, now))
    if lease > now then
      redis.call('ZADD', index, lease, tag)
    else
      due[string.match(tag, '^([^:]+):')] = true
    end
  end
end
if #past >= look then
  return {now, 1}  -- (the entries looked at are repaired: the next tick looks further)
end
local come = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, look)
for _, tag in ipairs(come) do
  if redis.call('HEXISTS', meta, 'm:' .. tag) == 0 then
    redis.call('ZREM', schedule, tag)
  else
    due[string.match(tag, '^([^:]+):')] = true
  end
end
if #come >= look then
  return {now, 1}
end
local result = {now, 0}
for _, name in ipairs(cjson.decode(topo)['groups']) do
  local ts = redis.call('HGET', meta, 'ts:' .. name)
  local is_due = due[name] or not ts
  if ts and not is_due then
    local deadline, ended, oldest = string.match(ts, '^(%S+) (%d+) (%S+)$')
    is_due = (deadline ~= '-' and tonumber(deadline) <= now)
      or tonumber(ended) > max_ended
      or (oldest ~= '-' and tonumber(oldest) + retention <= now)
  end
  if is_due then
    result[#result + 1] = name
  end
end
return result
