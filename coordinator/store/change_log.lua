-- The change log of member records (docs/store.md, "Delta loads"): one rule for the script that writes
-- it (commit.lua) and the one that reads it (load.lua). Not a script on its own:
-- coordinator/store/redis_store.py prepends this text to both.
--
-- Fields of rsc:{P}:meta:
--   ds          the prefix's commit sequence: counted up by every commit.lua that writes anything
--   dl:<slot>   slot = seq % LOG_SLOTS: "<seq> <commit token>[ <tag>...]", one entry per commit, where a tag
--               is <group>:<member> for every d: record the commit wrote or deleted, or <group>:* when it
--               touched more than LOG_TAGS records of that group (the reader then reads that group whole)
--
-- A reader that knows a group as it was at (seq S, token T) reads only the records named by the entries
-- S+1..ds, if the entry in slot S % LOG_SLOTS is still "S T": the log has not wrapped since, and no
-- rollback (a restarted Redis, a restored snapshot, a prefix deleted and created again) replaced what it
-- knew, since commit tokens are never reused; and if every commit since is in the log (the last entry's
-- token is `txn`, the last commit's, and no entry after S says LOG_BROKEN). Anything else: it reads the
-- group whole.

local LOG_SLOTS = 512
local LOG_TAGS = 64
-- A tag of an entry whose commit found the commit before it missing from the log (written by a
-- coordinator from before the log): no delta spans it.
local LOG_BROKEN = '!'

local function log_slot_field(seq)
  return 'dl:' .. tostring(seq % LOG_SLOTS)
end

-- The entry for `seq`: its token and the rest (the tags, space separated, leading space), or nil when the
-- slot holds no entry for that sequence.
local function log_entry(meta, seq)
  local entry = redis.call('HGET', meta, log_slot_field(seq))
  if not entry then
    return nil
  end
  local at, token, tags = string.match(entry, '^(%d+) (%S+)(.*)$')
  if tonumber(at) ~= seq then
    return nil
  end
  return token, tags
end
