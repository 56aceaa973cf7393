-- Trim one shard stream to what its consumer groups still need, plus the prefix's opt-in caps, removing
-- at most a given number of entries. Atomic: the floor is computed and applied in one script, so no
-- read or ack slips in between.
--
-- KEYS[1]  rsc:{P}:v<version>:<index>  (a shard stream of a non-retired version)
-- ARGV[1]  max_age_ms cap (decimal), or "" for none
-- ARGV[2]  max_len cap (decimal), or "" for none
-- ARGV[3]  budget: at most this many entries are removed by this call (decimal, >= 1)
--
-- The acked floor is the minimum, over every consumer group of the stream, of its oldest pending
-- entry id and its first undelivered id (last-delivered-id + 1). `XTRIM MINID <floor>` removes only
-- entries below it: never an entry still pending, and never one not yet delivered, for any group. A
-- stream without consumer groups has no floor: only the caps trim it. The caps (opt-in, documented data
-- loss) trim regardless of the groups: MINID <Redis now - max_age_ms> and MAXLEN <max_len>.
--
-- Bounded work: a stream never trimmed before (or a cap just set) may have millions of entries to
-- remove, and one exact XTRIM of them would block Redis for as long (about 30 ms a million). Each trim
-- therefore removes whole stream nodes first (`~ ... LIMIT`, which never removes an entry the exact
-- trim would keep), then the few entries left below the threshold exactly, if they fit in what is left
-- of the budget. Whatever the budget did not cover is trimmed by the next visits.
--
-- Returns {trimmed below the acked floor, trimmed by the caps, floor id or ""}; {-1, 0, ""} when the
-- stream does not exist. Touches: EXISTS, XINFO GROUPS, XPENDING, XRANGE, XLEN (read); XTRIM on
-- KEYS[1]; TIME.
local stream = KEYS[1]
if redis.call('EXISTS', stream) == 0 then
  return {-1, 0, ''}
end
local budget = tonumber(ARGV[3])

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function less(a, b)
  local ams, aseq = parse(a)
  local bms, bseq = parse(b)
  return ams < bms or (ams == bms and aseq < bseq)
end

local function after(id)
  -- The smallest id greater than `id`. Sequence numbers stay far below 2^53 in practice (one
  -- millisecond would need that many entries), so doubles are exact here.
  local ms, seq = parse(id)
  return string.format('%.0f-%.0f', ms, seq + 1)
end

-- Remove the entries below id `threshold` (MINID) or all but the newest `threshold` (MAXLEN), at most
-- `budget` of them; returns how many were removed.
local function trim(strategy, threshold)
  if budget <= 0 then
    return 0
  end
  local removed = redis.call('XTRIM', stream, strategy, '~', threshold, 'LIMIT', budget)
  local left = budget - removed
  local rest = 0
  if left > 0 then
    if strategy == 'MINID' then
      rest = #redis.call('XRANGE', stream, '-', '(' .. threshold, 'COUNT', left + 1)
    else
      rest = redis.call('XLEN', stream) - tonumber(threshold)
    end
  end
  if rest > 0 and rest <= left then
    removed = removed + redis.call('XTRIM', stream, strategy, threshold)
  end
  budget = budget - removed
  return removed
end

local floor = nil
for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local g = {}
  for i = 1, #info, 2 do
    g[info[i]] = info[i + 1]
  end
  local need = after(g['last-delivered-id'])
  if tonumber(g['pending']) > 0 then
    local oldest = redis.call('XPENDING', stream, g['name'], '-', '+', 1)[1][1]
    if less(oldest, need) then
      need = oldest
    end
  end
  if floor == nil or less(need, floor) then
    floor = need
  end
end

local acked = 0
if floor ~= nil then
  acked = trim('MINID', floor)
end
local capped = 0
if ARGV[1] ~= '' then
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
  if cutoff > 0 then
    capped = capped + trim('MINID', string.format('%.0f-0', cutoff))
  end
end
if ARGV[2] ~= '' then
  capped = capped + trim('MAXLEN', ARGV[2])
end
return {acked, capped, floor or ''}
