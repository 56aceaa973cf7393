-- Give back a stream prefix's decision turn (turns.py), if the caller still holds it.
--
-- KEYS[1]  rsc:{P}:turn
-- ARGV[1]  the token the caller took the turn with (SET KEYS[1] <token> NX PX <ttl>)
-- Returns  1 if the turn was the caller's and is given back, else 0 (it expired, or another took it
--          after it expired: that one's turn is left alone).
-- Touches  KEYS[1] only.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
