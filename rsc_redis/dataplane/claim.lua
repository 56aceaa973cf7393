-- Take over entries left pending by OTHER consumers of the shard (its previous owners): a fenced
-- XPENDING scan plus XCLAIM with min-idle 0. After fence.lua in the library.
--
-- Why not XAUTOCLAIM: it would also re-claim the member's own pending entries. Why no idle time: the
-- single-owner rule (docs/protocol.md section 4) means nobody else may still ack them.
--
-- KEYS[1]  rsc:{P}:meta                 KEYS[2]  rsc:{P}:<shard>
-- KEYS[3]  rsc:{P}:rd:<group>: the group's redeliver tokens (as in read_new.lua)
-- KEYS[4]  rsc:{P}:lr: the members' own lease renewals (the fence's; always the last key)
-- ARGV[1]  consumer group   ARGV[2]  member id   ARGV[3]  member epoch   ARGV[4]  shard
-- ARGV[5]  count (pending entries scanned per call)
-- ARGV[6]  cursor: '0-0' to start, else the cursor the previous call returned (exclusive)
--
-- Returns {status} when fenced, else {'OK', {{id, {field, value, ...}}, ...}, next cursor, {deliveries,
-- ...}, token}; the next cursor is '0-0' when the scan is complete; deliveries[i] is claimed entry i's
-- delivery count after the claim (the scan's count plus the one XCLAIM adds: no second XPENDING call).
-- Entries deleted from the stream are dropped from the pending list by XCLAIM (Redis >= 7) and not
-- returned. token is the shard's redeliver token (HGET KEYS[3] ARGV[4], or '0'), like read_new.lua's:
-- a new unit takes its first token from its first claim, before it hands anything out, so a redeliver
-- asked for while it takes over is not mistaken for an old one.
-- Raises a script error if KEYS[3] is not the group's redeliver key under KEYS[1].
-- Touches: the fence's fields (read); only when OK: HGET on KEYS[3]; XPENDING and XCLAIM on KEYS[2]
-- (moves the entries to the member's pending list and bumps their delivery counts).
local status = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'read', KEYS[#KEYS])
if status ~= 'OK' then
  return {status}
end
local token = redeliver_token(KEYS[1], KEYS[3], ARGV[1], ARGV[4])
local count = tonumber(ARGV[5])
local low = '-'
if ARGV[6] ~= '0-0' then
  low = '(' .. ARGV[6]
end
local pending = redis.call('XPENDING', KEYS[2], ARGV[1], low, '+', count)
local orphans = {}
local counts = {}
for _, p in ipairs(pending) do
  if p[2] ~= ARGV[2] then
    orphans[#orphans + 1] = p[1]
    counts[p[1]] = p[4] + 1
  end
end
local claimed = {}
local deliveries = {}
if #orphans > 0 then
  for _, reply in ipairs(call_chunked({'XCLAIM', KEYS[2], ARGV[1], ARGV[2], 0}, orphans)) do
    for _, entry in ipairs(reply) do
      if entry[2] then
        claimed[#claimed + 1] = entry
        deliveries[#claimed] = counts[entry[1]]
      end
    end
  end
end
local cursor = '0-0'
if #pending >= count then
  cursor = pending[#pending][1]
end
return {status, claimed, cursor, deliveries, token}
