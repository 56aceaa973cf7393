-- Compare-and-set commit of the full path: write documents and derived fields atomically, if no
-- document read by the caller has changed since it loaded them.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:lr, the members' own lease renewals (field <group>:<member> = "<epoch> <until ms>")
-- KEYS[3]  rsc:{P}:lz, the lease index: every live member (m: present), scored by its l: field
-- KEYS[4]  rsc:{P}:sz, the schedule index: live members scored by when the tick must next look at their
--          revocation
-- ARGV[1]  commit token (unique per attempt)
-- ARGV[2]  now_ms the caller decided at (the TIME its load read)
-- then seven sections, each a count followed by its items:
--   rev checks      field, expected value ("" = field must be absent)  (t#, g#:<g>, gm#:<g>, d#:<g>:<m>)
--   sets            field, value                                         (docs, revs, derived fields)
--   deletes         field
--   lease sets      field, deadline ms   (written as max(current, new): leases never go back)
--   expiry checks   field                (the lease must still have ended at now_ms: the l: field and
--                                         the member's own renewal at its live epoch, if any)
--   increments      field                (HINCRBY 1: gm#:<g> of a commit that writes member records only)
--   schedule        tag, score or ""     (ZADD to, or with "" ZREM from, the schedule index)
--
-- Deleting a member's m: or l: field also deletes its renewal record (a member that ended renews
-- nothing; the records stay as many as the live members). Changing a member's m: (its epoch) folds a
-- record written at the old epoch into its l: field (the later of the two) and deletes the record, so
-- the lease the member knows does not shrink under it when the answer that moved it is lost.
--
-- Records are judged (rsc_redis/lease_record.lua) on Redis's TIME at this commit, as every other reader
-- judges them, never earlier than now_ms: a member may renew after the load (its record says that
-- renewal's TIME + TTL); judged at now_ms, the record would count only up to now_ms + TTL or, landed
-- over RECORD_SLACK_MS after the load (a slow commit), be taken for a forged one and deleted unfolded,
-- shrinking the lease. The expiry check still compares with now_ms, the moment the expiry was decided at.
--
-- The lease index follows every member whose m: or l: field this commit writes or deletes (in it, at
-- its l: deadline, while m: exists; out of it otherwise). A group whose tick schedule (ts:) is written
-- for the first time (metadata from before the index) has all its members indexed here, once.
--
-- Every commit counts `ds` up and writes its change-log entry (change_log.lua): its token and the member
-- records (d: fields) it wrote or deleted.
--
-- Returns {1, seq, previous token} when committed (seq: this commit's sequence; previous token: that of
-- the entry at seq - 1, false if there is none or the last commit is not in the log, so the caller can
-- tell whether any other commit came between its load and this one), {2} when this token was already committed (a retry after a lost
-- reply), {0} on conflict (nothing written). Touches: the fields listed plus `txn`, `ds` and one `dl:`
-- slot; TIME; HGET/HDEL on KEYS[2]; ZADD/ZREM on KEYS[3] and KEYS[4].
local meta = KEYS[1]
local records = require_lease_records_key(meta, KEYS[2])
local index = require_lease_index_key(meta, KEYS[3])
local schedule = require_schedule_index_key(meta, KEYS[4])
-- Every write below needs ZADD on the index at the end: a Redis user without it (an ACL not yet updated,
-- docs/redis-acl.md) must fail before the first write, not after the documents (a no-op: '' is no tag).
redis.call('ZADD', index, 'XX', 0, '')
local touched = {}  -- <group>:<member> tags whose m: or l: field this commit writes or deletes
local records_written = {}  -- <group>:<member> tags whose d: record this commit writes or deletes
local new_groups = {}  -- groups indexed for the first time
local token = ARGV[1]
local now = tonumber(ARGV[2])
local t = redis.call('TIME')
-- The moment lease records are judged at: TIME, or now_ms (a TIME the load read) if the clock stepped
-- back since (a failover), so that no record the load counted is dropped here.
local records_now = math.max(now, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local i = 3

local function section()
  local n = tonumber(ARGV[i])
  local start = i + 1
  i = i + 1 + n
  return start, n
end

local rc_start, rc_n = section()
for j = 0, rc_n - 1, 2 do
  local current = redis.call('HGET', meta, ARGV[rc_start + j]) or ''
  if current ~= ARGV[rc_start + j + 1] then
    if redis.call('HGET', meta, 'txn') == token then
      return {2}
    end
    return {0}
  end
end
local set_start, set_n = section()
local del_start, del_n = section()
local lease_start, lease_n = section()
local exp_start, exp_n = section()
local inc_start, inc_n = section()
local sched_start, sched_n = section()
for j = 0, exp_n - 1 do
  local field = ARGV[exp_start + j]
  local lease = tonumber(redis.call('HGET', meta, field) or '0')
  if lease > now then
    return {0}
  end
  if renewed_until(meta, records, string.sub(field, 3), nil, records_now) > now then
    return {0}  -- the member renewed its lease itself since the caller loaded: not expired
  end
end
for j = 0, set_n - 1, 2 do
  local field, value = ARGV[set_start + j], ARGV[set_start + j + 1]
  local kind = string.sub(field, 1, 2)
  if kind == 'd:' then
    records_written[#records_written + 1] = string.sub(field, 3)
  end
  if kind == 'ts' and redis.call('HEXISTS', meta, field) == 0 then
    new_groups[#new_groups + 1] = string.sub(field, 4)
  elseif kind == 'm:' then
    touched[#touched + 1] = string.sub(field, 3)
    -- The member's epoch moves: a renewal record at the old epoch would stop counting, and the member
    -- (whose answer may be lost) still counts on it. Fold it into l: first (leases never go back).
    local tag = string.sub(field, 3)
    local old_epoch = redis.call('HGET', meta, field)
    if old_epoch and old_epoch ~= value then
      local deadline = renewed_until(meta, records, tag, old_epoch, records_now)
      if deadline > 0 and deadline > tonumber(redis.call('HGET', meta, 'l:' .. tag) or '0') then
        redis.call('HSET', meta, 'l:' .. tag, deadline)
      end
      redis.call('HDEL', records, tag)
    end
  end
  redis.call('HSET', meta, field, value)
end
for j = 0, del_n - 1 do
  local field = ARGV[del_start + j]
  redis.call('HDEL', meta, field)
  local kind = string.sub(field, 1, 2)
  if kind == 'd:' then
    records_written[#records_written + 1] = string.sub(field, 3)
  end
  if kind == 'm:' or kind == 'l:' then
    redis.call('HDEL', records, string.sub(field, 3))
    touched[#touched + 1] = string.sub(field, 3)
  end
end
for j = 0, lease_n - 1, 2 do
  local field = ARGV[lease_start + j]
  local new = tonumber(ARGV[lease_start + j + 1])
  local current = tonumber(redis.call('HGET', meta, field) or '0')
  if new > current then
    redis.call('HSET', meta, field, new)
  end
  touched[#touched + 1] = string.sub(field, 3)
end
for j = 0, inc_n - 1 do
  redis.call('HINCRBY', meta, ARGV[inc_start + j], 1)
end
for j = 0, sched_n - 1, 2 do
  local tag, score = ARGV[sched_start + j], ARGV[sched_start + j + 1]
  if score == '' then
    redis.call('ZREM', schedule, tag)
  else
    redis.call('ZADD', schedule, tonumber(score), tag)
  end
end
for _, name in ipairs(new_groups) do
  for id in string.gmatch(redis.call('HGET', meta, 'ml:' .. name) or '', '%S+') do
    touched[#touched + 1] = name .. ':' .. id
  end
end
for _, tag in ipairs(touched) do
  if redis.call('HEXISTS', meta, 'm:' .. tag) == 1 then
    redis.call('ZADD', index, tonumber(redis.call('HGET', meta, 'l:' .. tag) or '0'), tag)
  else
    redis.call('ZREM', index, tag)
  end
end
-- The change log: which records this commit wrote, a group named whole beyond LOG_TAGS of its records.
-- A commit before this one that is not in the log (`txn` is not the last entry's token: a coordinator of
-- the version before the log committed) breaks it: this entry says so (LOG_BROKEN), and no reader may
-- read a delta across it.
local seq = redis.call('HINCRBY', meta, 'ds', 1)
local previous = log_entry(meta, seq - 1)
if previous ~= redis.call('HGET', meta, 'txn') then
  previous = nil
end
local per_group, order, tags = {}, {}, {}
if not previous then
  tags[1] = ' ' .. LOG_BROKEN
end
for _, tag in ipairs(records_written) do
  local name = string.match(tag, '^[^:]+')
  if not per_group[name] then
    per_group[name] = {}
    order[#order + 1] = name
  end
  table.insert(per_group[name], tag)
end
for _, name in ipairs(order) do
  if #per_group[name] <= LOG_TAGS then
    for _, tag in ipairs(per_group[name]) do
      tags[#tags + 1] = ' ' .. tag
    end
  else
    tags[#tags + 1] = ' ' .. name .. ':*'
  end
end
redis.call('HSET', meta, log_slot_field(seq), seq .. ' ' .. token .. table.concat(tags))
redis.call('HSET', meta, 'txn', token)
return {1, seq, previous or false}
