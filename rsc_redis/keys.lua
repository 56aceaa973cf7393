-- The key layout for Lua: the one helper by which a script names a key of the prefix it works on
-- (rsc_redis/keys.py is the layout; tests/test_keys.py checks these helpers against it in a real Redis).
-- Not a script on its own: rsc_redis/lua.py puts this text in front of every script that uses it.
--
-- A script receives its keys from the caller (KEYS, built by rsc_redis/keys.py), the prefix's metadata
-- key rsc:{P}:meta first. Where it must check that another key it was given is the right key of that
-- prefix (a shard's stream, a group's key, the members' own renewals), it builds the expected key with
-- these helpers and compares: keys of one prefix share the hash tag {P}, so the check also keeps every
-- key of a call in one Redis Cluster slot.

-- rsc:{P}:<suffix>, the key of the same stream prefix as `meta` (rsc:{P}:meta, keys.meta_key).
local function prefix_key(meta, suffix)
  return string.sub(meta, 1, -5) .. suffix
end

-- rsc:{P}:<shard>: the stream of `shard` (wire form v<version>:<index>; keys.stream_key).
local function stream_key_of(meta, shard)
  return prefix_key(meta, shard)
end

-- rsc:{P}:<kind>:<group>: the group's key of `kind`, 'rd' (keys.redeliver_key) or 'dlq'
-- (keys.dead_letter_key).
local function group_key_of(meta, kind, group)
  return prefix_key(meta, kind .. ':' .. group)
end

-- The global key that every committed API-credential change moves on (keys.CREDENTIALS_GENERATION_KEY).
local CREDENTIALS_GENERATION_KEY = 'rsc:credentials:generation'
