-- A join by an API credential: its join rate, then its cap on live members, both counted in Redis so
-- they hold across every API process (coordinator/store/credential_limits.py; docs/protocol.md
-- section 13, "Per credential"). Called before the join is decided; nothing else is touched.
--
-- KEYS[1]  rsc:credential:{<c>}:members: <P>:<G>:<member> scored by when each was last known live (ms)
-- KEYS[2]  rsc:credential:{<c>}:joins: the join rate's GCRA arrival time (expires by itself)
-- ARGV[1]  the member, "<P>:<G>:<member>"
-- ARGV[2]  live members the credential may have (0: no cap, and KEYS[1] is neither read nor written)
-- ARGV[3]  join rate: milliseconds per join sustained (0: no rate)
-- ARGV[4]  join rate: burst (joins accepted back to back)
-- ARGV[5]  trust: a member known live less than this many ms ago counts without a check (0: none does)
-- ARGV[6]  at most this many members older than that returned to check
--
-- Returns {1, <retry after ms>} when the rate refuses the join (nothing touched);
-- {2, <count>, member, score, member, score, ...} when the cap is reached and these members were last
-- known live longer ago than ARGV[5]: the caller checks them against the metadata (confirm_members.lua)
-- and calls again (nothing touched);
-- {3, <count>} when the cap is reached by members all known live recently (nothing touched);
-- {0, <1 if ARGV[1] is counted from now on (known live as of now), 0 if it was already (left as it is)>}:
-- admitted, and the rate has taken the join.
-- A member already counted (a rejoin, a retried join) never meets the cap; every join meets the rate.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap, period, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local next_tat
if period > 0 then
  local tat = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if tat < now then
    tat = now
  end
  next_tat = tat + period
  local wait = next_tat - now - period * burst
  if wait > 0 then
    return {1, wait}
  end
end
local added = 0
if cap > 0 then
  if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    local count = redis.call('ZCARD', KEYS[1])
    if count >= cap then
      local stale = redis.call(
        'ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[5]),
        'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[6]))
      if #stale == 0 then
        return {3, count}
      end
      local reply = {2, count}
      for i = 1, #stale do
        reply[#reply + 1] = stale[i]
      end
      return reply
    end
    redis.call('ZADD', KEYS[1], now, ARGV[1])
    added = 1
  end
end
if period > 0 then
  redis.call('SET', KEYS[2], next_tat, 'PX', next_tat - now)
end
return {0, added}
