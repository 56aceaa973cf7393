-- Load the documents of one stream prefix (for the full path), with Redis's clock.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:lr, the members' own lease renewals
-- ARGV[1]  whose leases: "*" every member's, or member ids separated by spaces: those members' and those
--          of the members whose records are returned (a heartbeat decides on its own lease only)
-- ARGV[2]  k, then k triples: group, seq, token: the groups the caller knows, as they were at that
--          position of the change log (change_log.lua); the others are read whole
-- then     "*" for every group of the prefix, or the names of the groups to load
--
-- Returns {now_ms, topology doc or false, topology rev, {seq, token} or false, groups}: the position of
-- the change log this read is at (false when the metadata has no log yet), and groups a list of
-- {name, doc or false, rev, members rev, whole, {member ids}, {records}, {record revs}, {lease ids},
-- {lease deadlines}}:
--   whole 1: the member ids are every member of the group (ml:), with their records and revisions;
--   whole 0: the caller's position was still valid: only the members whose records were written or
--            deleted since are listed (a record false: deleted), the caller knows the others;
--   leases: of every member with "*", else of the members named and the members listed.
-- (a rev of "" means "absent"; the members rev is gm#:<g>, counted up by every commit that writes member
-- records only). A member's record is false in a group document of format 1 (the members are inside
-- it). A member's lease deadline is the later of its l: field and its own renewal record, when that
-- record was written at the member's live epoch (m:).
-- Read only. Touches: t, t#, ds, dl:<slot>, g:<g>, g#:<g>, gm#:<g>, ml:<g>, d:/d#:/l:<g>:<m>,
-- m:<g>:<m>, lt:<g> (members with a renewal record); HLEN and HGET on KEYS[2].
local meta = KEYS[1]
local records = require_lease_records_key(meta, KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local topo = redis.call('HGET', meta, 't')
local trev = redis.call('HGET', meta, 't#') or ''
local lease_of = {}  -- the members named in ARGV[1], in order (empty for "*")
local lease_named = {}
if ARGV[1] ~= '*' then
  for id in string.gmatch(ARGV[1], '%S+') do
    lease_of[#lease_of + 1] = id
    lease_named[id] = true
  end
end
local known = {}  -- group -> {seq, token}
local k = tonumber(ARGV[2])
for j = 0, k - 1 do
  known[ARGV[3 + 3 * j]] = {tonumber(ARGV[4 + 3 * j]), ARGV[5 + 3 * j]}
end
local names = {}
for j = 3 + 3 * k, #ARGV do
  names[#names + 1] = ARGV[j]
end
if names[1] == '*' then
  names = {}
  if topo then
    names = cjson.decode(topo)['groups']
  end
end
local seq = tonumber(redis.call('HGET', meta, 'ds') or '0')
local position = false
if seq > 0 then
  local token = log_entry(meta, seq)
  if token and token == redis.call('HGET', meta, 'txn') then  -- else the last commit is not in the log
    position = {seq, token}
  end
end

-- The members' own renewals: a prefix has at most one per live member, usually none (then no member's
-- is read). Never read whole: the members' Redis user may write the hash, so its size is not ours.
local any_renewed = redis.call('HLEN', records) > 0

-- The tags of the records written since `from` (a known position), per group: tag -> true, or the
-- group -> '*' when one entry named it whole. False when the position is no longer in the log.
local changes_since = {}  -- "<seq> <token>" -> result (the log is read once per distinct position; two
                          -- groups known at one seq may know it with different tokens, after a rollback)
local function changes(from, token)
  local key = from .. ' ' .. token
  if changes_since[key] ~= nil then
    return changes_since[key]
  end
  local result = false
  if position and from <= seq and seq - from < LOG_SLOTS and log_entry(meta, from) == token then
    result = {}
    for s = from + 1, seq do
      local _, tags = log_entry(meta, s)
      if tags == nil or string.find(tags, ' ' .. LOG_BROKEN, 1, true) then
        result = false  -- a gap (cannot be), or a commit before this one is not in the log
        break
      end
      for name, id in string.gmatch(tags, '([^ :]+):(%S+)') do
        local group = result[name]
        if group == nil then
          group = {}
          result[name] = group
        end
        if group ~= '*' then
          if id == '*' then
            result[name] = '*'
          else
            group[id] = true
          end
        end
      end
    end
  end
  changes_since[key] = result
  return result
end

-- {field name suffix per member} -> values, a few thousand fields per HMGET (one call, not one per
-- member: a call costs more than the fields it reads; unpack has a stack limit).
local function read_fields(name, ids, kinds)
  local values = {}
  local per_call = 2000
  local width = #kinds
  for first = 1, #ids, per_call do
    local last = math.min(first + per_call - 1, #ids)
    local fields = {}
    for n = first, last do
      local tag = name .. ':' .. ids[n]
      for _, kind in ipairs(kinds) do
        fields[#fields + 1] = kind .. tag
      end
    end
    local got = redis.call('HMGET', meta, unpack(fields))
    for j = 1, #got do
      values[(first - 1) * width + j] = got[j]
    end
  end
  return values
end

local function lease_of_member(name, id, l_value)
  local lease = tonumber(l_value or '0')
  local tag = name .. ':' .. id
  if any_renewed then
    lease = math.max(lease, renewed_until(meta, records, tag, nil, now))
  end
  return string.format('%.0f', lease)
end

local groups = {}
for i, name in ipairs(names) do
  local head = redis.call('HMGET', meta, 'g:' .. name, 'g#:' .. name, 'gm#:' .. name)
  local every = nil  -- the member ids (ml:), read only when needed
  local function members()
    if every == nil then
      every = {}
      for id in string.gmatch(redis.call('HGET', meta, 'ml:' .. name) or '', '%S+') do
        every[#every + 1] = id
      end
    end
    return every
  end
  local at = known[name]
  local since = at and changes(at[1], at[2])
  local ids, docs, revs, lease_ids, leases = {}, {}, {}, {}, {}
  if since and since[name] ~= '*' then
    for id in pairs(since[name] or {}) do
      ids[#ids + 1] = id
    end
    table.sort(ids)
    local values = read_fields(name, ids, {'d:', 'd#:'})
    for n = 1, #ids do
      docs[n] = values[2 * n - 1]
      revs[n] = values[2 * n] or ''
    end
    if ARGV[1] == '*' then
      lease_ids = members()
    else
      for _, id in ipairs(lease_of) do
        lease_ids[#lease_ids + 1] = id
      end
      for _, id in ipairs(ids) do
        if not lease_named[id] then
          lease_ids[#lease_ids + 1] = id
        end
      end
    end
    values = read_fields(name, lease_ids, {'l:'})
    for n = 1, #lease_ids do
      leases[n] = lease_of_member(name, lease_ids[n], values[n])
    end
    groups[i] = {name, head[1], head[2] or '', head[3] or '', 0, ids, docs, revs, lease_ids, leases}
  else
    -- Whole: every member's record, revision and lease in one pass.
    ids = members()
    local values = read_fields(name, ids, {'d:', 'd#:', 'l:'})
    for n = 1, #ids do
      docs[n] = values[3 * n - 2]
      revs[n] = values[3 * n - 1] or ''
      leases[n] = lease_of_member(name, ids[n], values[3 * n])
    end
    groups[i] = {name, head[1], head[2] or '', head[3] or '', 1, ids, docs, revs, ids, leases}
  end
end
return {now, topo, trev, position, groups}
