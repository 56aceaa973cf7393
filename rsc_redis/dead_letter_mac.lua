-- The MAC of a dead letter (docs/protocol.md section 14, "Dead letters the coordinator can trust"): the
-- data plane's dead_letter function adds it, as its last field dlq_mac, to every copy it writes, and
-- the coordinator checks it (rsc_redis/dead_letter_mac.py, the same construction in Python) before it
-- replays a dead letter or shows one as written by the dead-letter function.
--
-- Not a script on its own: rsc_redis/dataplane/library.py puts it into the data plane's Redis Functions
-- library, whose text the coordinator renders with the two keys (hex, derived from its secret) in place
-- of the placeholders below. Members and producers call the library's functions but cannot read its
-- code (their Redis users have neither FUNCTION LIST nor FUNCTION DUMP), so they cannot compute a MAC.
--
-- dead_letter_mac(key, flat, from): lower-case hex of sha1(outer .. sha1hex(inner .. message)), the
-- nested (HMAC-like) construction, SHA-1 being what Lua in Redis has (redis.sha1hex); the outer hash
-- keeps the inner one from being extended. message is the netstring encoding (<length>:<bytes>,) of
-- `key` (the dead-letter stream's key), then of flat[from], flat[from + 1], ... flat[#flat]: every field
-- name and value of the copy, in order. Netstrings make the encoding unambiguous: no two different
-- lists of strings encode the same way.
local DLQ_MAC_INNER = '{{DLQ_MAC_INNER}}'
local DLQ_MAC_OUTER = '{{DLQ_MAC_OUTER}}'

local function dead_letter_mac(key, flat, from)
  local parts = {#key .. ':' .. key .. ','}
  for i = from, #flat do
    local value = flat[i]
    parts[#parts + 1] = #value .. ':' .. value .. ','
  end
  return redis.sha1hex(DLQ_MAC_OUTER .. redis.sha1hex(DLQ_MAC_INNER .. table.concat(parts)))
end
