local function store_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function too_late(use_by)
  local now = store_ms()
  local limit = tonumber(use_by)
  return limit > 0 and now > limit, now
end
