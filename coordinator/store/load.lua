-- Load the documents of one stream prefix (for the full path), with Redis's clock.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:lr, the members' own lease renewals
-- ARGV     "*" for every group of the prefix, or the names of the groups to load
--
-- Returns {now_ms, topology doc or false, topology rev, groups} where groups is a list of
-- {name, doc or false, rev, members rev, {member ids}, {lease deadlines}, {records}, {record revs}}
-- (a rev of "" means "absent"; the members rev is gm#:<g>, counted up by every commit that writes member
-- records only). A member's record is false in a group document of format 1 (the members are inside
-- it). A member's lease deadline is the later of its l: field and its own renewal record, when that
-- record was written at the member's live epoch (m:).
-- Read only. Touches: t, t#, g:<g>, g#:<g>, gm#:<g>, ml:<g>, d:/d#:/l:<g>:<m>, m:<g>:<m> (members with a
-- record); HGETALL and HGET on KEYS[2].
local meta = KEYS[1]
local records = require_lease_records_key(meta, KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local topo = redis.call('HGET', meta, 't')
local trev = redis.call('HGET', meta, 't#') or ''
local names = ARGV
if ARGV[1] == '*' then
  names = {}
  if topo then
    names = cjson.decode(topo)['groups']
  end
end
-- The members' own renewals, read once: a prefix has at most one per live member, usually none.
local renewed = {}
local flat = redis.call('HGETALL', records)
for j = 1, #flat, 2 do
  renewed[flat[j]] = true
end
local groups = {}
for i, name in ipairs(names) do
  local head = redis.call('HMGET', meta, 'g:' .. name, 'g#:' .. name, 'gm#:' .. name, 'ml:' .. name)
  local ids, leases, docs, revs = {}, {}, {}, {}
  if head[4] then
    for id in string.gmatch(head[4], '%S+') do
      ids[#ids + 1] = id
    end
    -- Each member's record, revision and lease, a few thousand fields per HMGET (one call, not one per
    -- member: a call costs more than the fields it reads; unpack has a stack limit).
    local per_call = 2000
    for first = 1, #ids, per_call do
      local last = math.min(first + per_call - 1, #ids)
      local fields = {}
      for n = first, last do
        local tag = name .. ':' .. ids[n]
        fields[#fields + 1] = 'd:' .. tag
        fields[#fields + 1] = 'd#:' .. tag
        fields[#fields + 1] = 'l:' .. tag
      end
      local values = redis.call('HMGET', meta, unpack(fields))
      for n = first, last do
        local k = (n - first) * 3
        docs[n] = values[k + 1]
        revs[n] = values[k + 2] or ''
        local lease = tonumber(values[k + 3] or '0')
        local tag = name .. ':' .. ids[n]
        if renewed[tag] then
          lease = math.max(lease, renewed_until(meta, records, tag, nil))
        end
        leases[n] = tostring(lease)
      end
    end
  end
  groups[i] = {name, head[1], head[2] or '', head[3] or '', ids, leases, docs, revs}
end
return {now, topo, trev, groups}
