-- One member's fetch for many shards at once: per shard, the fenced XACK of what the member handled
-- since its last fetch of that shard (the folded ack), then the fenced read of new entries, for every
-- shard in one call. After fence.lua in the library.
--
-- Each shard is fenced on its own (owner_status, mode_status): a refusal for one shard leaves the
-- others alone. The member checks (live, lease by Redis TIME) are the same for every shard and run
-- once; when they refuse, nothing is acked or read. One HMGET reads every field the fences need.
--
-- KEYS[1]      rsc:{P}:meta
-- KEYS[2]      rsc:{P}:rd:<group>: the group's redeliver tokens (as in read_new.lua)
-- KEYS[2 + i]  rsc:{P}:<shard i>: the stream of the i-th shard of ARGV
-- KEYS[3 + n]  rsc:{P}:lr: the members' own lease renewals (fence.lua)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  count (new entries read per shard, at most)
-- ARGV[4]  n, the number of shards; then, per shard, in KEYS order:
--          shard (v<n>:<i>), epoch presented, read ('1': read new entries; '2': read them, and when
--          there are none say up to where the group has read; '0': ack only), the
--          redeliver token the caller knows ('' if none), a (the number of ack ids), then a entry ids
--          to acknowledge
--
-- Returns {'MEMBER_FENCED'} when the member is not live or its lease ended (nothing acked, nothing
-- read), else {'OK', {report, ...}}, one report per shard with news, each {i, ...} (i: the shard's
-- position in ARGV, from 1) followed by one of
--   status, -1                    the fence refused the shard (NOT_OWNER, STALE_EPOCH): nothing acked
--   status, acked                 acked (XACK's count), then the read was refused: NOT_READABLE (held back
--                                 by strict ordering) or NOT_OWNER (being revoked: ack only)
--   'OK', acked, entries, token   acked, then XREADGROUP ... '>' of this shard (first deliveries) and
--                                 its redeliver token ('0': none); entries flat, two values per entry:
--                                 {id, envelope, id, envelope, ...}, the envelope being the value of the
--                                 entry's one field `envelope` (coordinator/protocol/envelope.py), or,
--                                 for an entry with other fields (one written before that layout),
--                                 its {field, value, ...} as read_new.lua returns them
--   'OK', acked, {}, token, last  read '2' and nothing new: `last` is the group's last-delivered id on
--                                 the shard (XINFO GROUPS), the id after which a member waits for new
--                                 entries (XREAD BLOCK, consumers/member/waiter.py)
-- A shard without news, not read with '2', is not reported, so that idle shards cost (almost) no
-- reply: its fence passed,
-- its acks were applied and, when it was read, nothing new was there and its token is the known one.
-- Raises a script error, before any write, if a stream key is not its shard's, KEYS[2] is not the
-- group's redeliver key or a metadata field is malformed; and if XREADGROUP fails (a missing group),
-- after the acks: the call fails for every shard, its outcome unknown as after a connection error.
-- Touches: the fences' fields (one HMGET on KEYS[1]); only for shards whose fence passed: XACK on their
-- streams; for those also readable and asked to read: HMGET on KEYS[2], one XREADGROUP over their
-- streams; for read '2' shards with nothing new, XINFO GROUPS on their streams.
local group, member, count = ARGV[1], ARGV[2], ARGV[3]

-- The group's last-delivered id on a stream: new entries are exactly those after it.
local function last_delivered(key, name)
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local found, last = false, nil
    for k = 1, #info, 2 do
      if info[k] == 'name' then
        found = info[k + 1] == name
      elseif info[k] == 'last-delivered-id' then
        last = info[k + 1]
      end
    end
    if found then
      return last
    end
  end
  return '0-0'
end
local n = tonumber(ARGV[4])
-- First pass, before any write: where each shard's arguments start, and its stream key checked.
local at = {}
local next_at = 5
for i = 1, n do
  at[i] = next_at
  require_shard_key(KEYS[1], KEYS[2 + i], ARGV[next_at])
  next_at = next_at + 5 + tonumber(ARGV[next_at + 4])
end
require_group_key(KEYS[1], KEYS[2], 'rd', group, 'redeliver')

-- Every field the fences need, in one read: the member's two, then each shard's owner.
local tag = group .. ':' .. member
local names = {'m:' .. tag, 'l:' .. tag}
for i = 1, n do
  names[2 + i] = 'o:' .. group .. ':' .. ARGV[at[i]]
end
local fields = redis.call('HMGET', KEYS[1], unpack(names))
local member_epoch = member_epoch_of(KEYS[1], KEYS[#KEYS], tag, fields[1], fields[2])
if not member_epoch then
  return {'MEMBER_FENCED'}
end

-- Every shard's fence before any write (a malformed field raises before anything changed).
local statuses, modes = {}, {}
for i = 1, n do
  local a = at[i]
  statuses[i], modes[i] = owner_status(fields[2 + i], group, member, member_epoch, ARGV[a + 1], ARGV[a])
end

local reports, readers, acked = {}, {}, {}
for i = 1, n do
  local a, key, status, mode = at[i], KEYS[2 + i], statuses[i], modes[i]
  if status ~= 'OK' then
    reports[#reports + 1] = {i, status, -1}
  else
    local acks = tonumber(ARGV[a + 4])
    acked[i] = 0
    local last = a + 4 + acks
    for first = a + 5, last, 500 do  -- in chunks: unpack() of too many values overflows Lua's C stack
      acked[i] = acked[i] + redis.call('XACK', key, group, unpack(ARGV, first, math.min(first + 499, last)))
    end
    local read_status = mode_status(mode, 'read')
    if read_status ~= 'OK' then
      reports[#reports + 1] = {i, read_status, acked[i]}
    elseif ARGV[a + 2] ~= '0' then
      readers[#readers + 1] = i
    end
  end
end
if #readers == 0 then
  return {'OK', reports}
end

local shards, args = {}, {'XREADGROUP', 'GROUP', group, member, 'COUNT', count, 'STREAMS'}
for j, i in ipairs(readers) do
  shards[j] = ARGV[at[i]]
  args[7 + j] = KEYS[2 + i]
  args[7 + #readers + j] = '>'
end
local tokens = redis.call('HMGET', KEYS[2], unpack(shards))
local by_key = {}
for _, stream in ipairs(redis.call(unpack(args)) or {}) do
  by_key[stream[1]] = stream[2]
end
-- Flat entries: one Lua table per shard for Redis to turn into a reply, not two per entry, and the
-- packed envelope without its field name.
for j, i in ipairs(readers) do
  local entries, token = by_key[KEYS[2 + i]], tokens[j] or '0'
  if entries or token ~= ARGV[at[i] + 3] then
    local flat, m = {}, 0
    for _, entry in ipairs(entries or {}) do
      local fields = entry[2]
      flat[m + 1] = entry[1]
      if fields[1] == 'envelope' and fields[3] == nil then
        flat[m + 2] = fields[2]
      else
        flat[m + 2] = fields
      end
      m = m + 2
    end
    reports[#reports + 1] = {i, 'OK', acked[i], flat, token}
  elseif ARGV[at[i] + 2] == '2' then
    reports[#reports + 1] = {i, 'OK', acked[i], {}, token, last_delivered(KEYS[2 + i], group)}
  end
end
return {'OK', reports}
