-- The outcome of checking a credential's members against the metadata (credential_limits.py): each one
-- found live is known live as of now, each one found gone is no longer counted; an entry whose score
-- moved since it was read (a join of it counted it again meanwhile) is left as it is.
--
-- KEYS[1]  rsc:credential:{<c>}:members
-- ARGV     triples: member, the score it was read with, "1" live / "0" gone
-- Returns the number of members no longer counted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = 0
for i = 1, #ARGV, 3 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    if ARGV[i + 2] == '1' then
      redis.call('ZADD', KEYS[1], 'XX', now, ARGV[i])
    else
      redis.call('ZREM', KEYS[1], ARGV[i])
      removed = removed + 1
    end
  end
end
return removed
