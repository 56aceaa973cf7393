-- Compare-and-set commit of the full path: write documents and derived fields atomically, if no
-- document read by the caller has changed since it loaded them.
--
-- KEYS[1]  rsc:{P}:meta
-- ARGV[1]  commit token (unique per attempt)
-- ARGV[2]  now_ms the caller decided at
-- then five sections, each a count followed by its items:
--   rev checks      field, expected value ("" = field must be absent)      (t#, g#:<g>)
--   sets            field, value                                         (docs, revs, derived fields)
--   deletes         field
--   lease sets      field, deadline ms   (written as max(current, new): leases never go back)
--   expiry checks   field                (the lease must still have ended at now_ms)
--
-- Returns 1 when committed, 2 when this token was already committed (a retry after a lost reply),
-- 0 on conflict (nothing written). Touches: the fields listed plus `txn`.
local meta = KEYS[1]
local token = ARGV[1]
local now = tonumber(ARGV[2])
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
      return 2
    end
    return 0
  end
end
local set_start, set_n = section()
local del_start, del_n = section()
local lease_start, lease_n = section()
local exp_start, exp_n = section()
for j = 0, exp_n - 1 do
  local lease = tonumber(redis.call('HGET', meta, ARGV[exp_start + j]) or '0')
  if lease > now then
    return 0
  end
end
for j = 0, set_n - 1, 2 do
  redis.call('HSET', meta, ARGV[set_start + j], ARGV[set_start + j + 1])
end
for j = 0, del_n - 1 do
  redis.call('HDEL', meta, ARGV[del_start + j])
end
for j = 0, lease_n - 1, 2 do
  local field = ARGV[lease_start + j]
  local new = tonumber(ARGV[lease_start + j + 1])
  local current = tonumber(redis.call('HGET', meta, field) or '0')
  if new > current then
    redis.call('HSET', meta, field, new)
  end
end
redis.call('HSET', meta, 'txn', token)
return 1
