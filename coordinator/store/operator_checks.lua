-- Checks shared by the operator scripts (skip, redeliver, replay and purge of dead letters). Lua scripts
-- cannot include one another: coordinator/store/operator_scripts.py prepends this text to each of them.
--
-- group_exists(meta, group)        the group's document g:<group> is in the metadata hash
-- version_is_live(meta, version)   `version` (decimal string) is the ACTIVE or a DRAINING routing version
--                                  by the `route` field: "<active> <shard count> <draining csv or ->"
-- now_ms()                         Redis TIME in ms, as a decimal string
-- Touches: HEXISTS g:<group>, HGET route (reads only); TIME.
local function group_exists(meta, group)
  return redis.call('HEXISTS', meta, 'g:' .. group) == 1
end

local function version_is_live(meta, version)
  local route = redis.call('HGET', meta, 'route')
  if not route then
    return false
  end
  local active, _, draining = string.match(route, '^(%d+) (%d+) (%S+)$')
  if active == version then
    return true
  end
  for v in string.gmatch(draining or '', '%d+') do
    if v == version then
      return true
    end
  end
  return false
end

local function now_ms()
  local t = redis.call('TIME')
  return string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
