-- Load the documents of one stream prefix (for the full path), with Redis's clock.
--
-- KEYS[1]  rsc:{P}:meta
-- KEYS[2]  rsc:{P}:lr, the members' own lease renewals
-- ARGV     "*" for every group of the prefix, or the names of the groups to load
--
-- Returns {now_ms, topology doc or false, topology rev, groups} where groups is a list of
-- {name, doc or false, rev, {member ids}, {lease deadlines}} (a rev of "" means "absent"). A member's
-- lease deadline is the later of its l: field and its own renewal record, when that record was written
-- at the member's live epoch (m:).
-- Read only. Touches: t, t#, g:<g>, g#:<g>, ml:<g>, l:<g>:<m>, m:<g>:<m> (members with a record);
-- HGET on KEYS[2].
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
local groups = {}
for i, name in ipairs(names) do
  local doc = redis.call('HGET', meta, 'g:' .. name)
  local rev = redis.call('HGET', meta, 'g#:' .. name) or ''
  local ids = {}
  local leases = {}
  local ml = redis.call('HGET', meta, 'ml:' .. name)
  if ml then
    for id in string.gmatch(ml, '%S+') do
      ids[#ids + 1] = id
      local tag = name .. ':' .. id
      local lease = tonumber(redis.call('HGET', meta, 'l:' .. tag) or '0')
      leases[#leases + 1] = tostring(math.max(lease, renewed_until(meta, records, tag, nil)))
    end
  end
  groups[i] = {name, doc, rev, ids, leases}
end
return {now, topo, trev, groups}
