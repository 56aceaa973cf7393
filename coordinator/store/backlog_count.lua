-- The backlog of consumer groups on one shard stream, counted from each group's own position (its
-- last-delivered id), never from XINFO's `lag`: Redis reports that as nil, or wrong, once a stream has
-- been trimmed (redis/redis#13337, #13957), which the retention pass does all the time. Read only.
--
-- KEYS[1]  rsc:{P}:v<version>:<index>  (a shard stream)
-- ARGV[1]  bound: at most this many entries are counted on each side of a group's position
-- ARGV[2..] consumer group names
--
-- Entries are only ever removed from the front of a shard stream (XTRIM; the acked floor never passes
-- a group's position, an opt-in cap may), so for a group whose last-delivered id is `ld`:
--   * nothing after `ld`                      -> 0 undelivered;
--   * the first entry after `ld` is the first -> every entry is undelivered (XLEN);
--   * otherwise `ld` is inside the stream     -> count the entries after `ld` (XRANGE, at most `bound`);
--     if there are `bound` or more, count the ones up to `ld` instead and subtract from XLEN; if both
--     sides hold `bound` or more, the exact figure is not read: Redis's own lag, clamped to what the two
--     scans proved ([bound, XLEN - bound]), is returned and marked inexact.
-- So the work is bounded (at most 2 * bound entries read per group) and the figure exact whenever the
-- group is within `bound` entries of either end of the stream. A group with no Redis consumer group on
-- the stream (not created yet) has read nothing: the whole stream is its backlog.
--
-- Returns one {undelivered, pending, oldest undelivered id or '', exact (1 or 0)} per group of ARGV, in
-- order; every figure 0 when the stream does not exist. Touches (read only): EXISTS, XINFO GROUPS, XLEN,
-- XRANGE on KEYS[1].
local stream = KEYS[1]
local bound = tonumber(ARGV[1])
local out = {}
if redis.call('EXISTS', stream) == 0 then
  for i = 2, #ARGV do
    out[i - 1] = {0, 0, '', 1}
  end
  return out
end

local groups = {}
for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local g = {}
  for k = 1, #info, 2 do
    g[info[k]] = info[k + 1]
  end
  groups[g['name']] = g
end
local length = redis.call('XLEN', stream)
local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]

local function count(from, to)
  return #redis.call('XRANGE', stream, from, to, 'COUNT', bound)
end

for i = 2, #ARGV do
  local g = groups[ARGV[i]]
  local ld, pending = '0-0', 0
  if g then
    ld, pending = g['last-delivered-id'], tonumber(g['pending'])
  end
  local undelivered, oldest, exact = 0, '', 1
  local after = redis.call('XRANGE', stream, '(' .. ld, '+', 'COUNT', 1)[1]
  if after then
    oldest = after[1]
    if after[1] == first[1] then
      undelivered = length
    else
      undelivered = count('(' .. ld, '+')
      if undelivered >= bound then
        local upto = count('-', ld)
        if upto < bound then
          undelivered = length - upto
        else
          local lag = g and g['lag']
          undelivered = math.max(bound, math.min(tonumber(lag) or bound, length - bound))
          exact = 0
        end
      end
    end
  end
  out[i - 1] = {undelivered, pending, oldest, exact}
end
return out
