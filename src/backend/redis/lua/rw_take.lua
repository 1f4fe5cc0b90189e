local late, now = too_late(ARGV[6])
if late then
  return {2, '', -1, now, {}}
end
local prefix, ttl = ARGV[1], tonumber(ARGV[3])
local shared = ARGV[7] == 'shared'
local function mine(v)
  return string.sub(v, 1, #prefix) == prefix
end
local reader, last = live_readers(KEYS[3], now)
local shown = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[8]) - 1)
local cur = redis.call('GET', KEYS[1])
if shared and reader then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    if mine(m) then
      redis.call('ZADD', KEYS[3], now + ttl, m)
      dequeue(KEYS[4], prefix)
      return {1, m, -1, now, shown}
    end
  end
end
if cur and not shared and mine(cur) then
  redis.call('PEXPIRE', KEYS[1], ttl)
  dequeue(KEYS[4], prefix)
  return {1, cur, -1, now, {}}
end
local live, own = queue(KEYS[4], KEYS[7], ARGV[9], now, prefix, ARGV[10], ttl)
local function wait(code, value, pttl, listed)
  enqueue(KEYS[4], own, shared and 'r' or 'w', prefix, ARGV[2], now, ttl, math.floor(ttl * 3 / 2))
  return {code, value, pttl, now, listed}
end
if cur then
  return wait(0, cur, redis.call('PTTL', KEYS[1]), {})
end
local left = reserved(KEYS[5], ARGV[2])
if left then
  return wait(0, '', left, {})
end
if reader and not shared then
  return wait(3, '', last - now, shown)
end
local first = ahead(live, own, shared)
if first then
  return wait(4, '', cutoff_left(KEYS[4], first, now, ttl), shown)
end
local floor = tonumber(ARGV[4])
if floor > 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], floor)
  local fenced = 'quarantine|' .. floor .. '|'
  redis.call('SET', KEYS[1], fenced, 'PX', ttl)
  return {0, fenced, ttl, now, {}}
end
local token = redis.call('INCR', KEYS[2])
if token <= floor then
  token = floor + 1
  redis.call('SET', KEYS[2], token)
end
local value = prefix .. token .. '|' .. ARGV[2]
dequeue(KEYS[4], prefix)
keep_queue(KEYS[4], KEYS[7], ttl)
if shared then
  redis.call('ZADD', KEYS[3], now + ttl, value)
  return {1, value, -1, now, shown}
end
redis.call('SET', KEYS[1], value, 'PX', ttl)
redis.call('DEL', KEYS[6])
redis.call('PUBLISH', ARGV[5], 'acquired|' .. value)
return {1, value, -1, now, {}}
