local late, now = too_late(ARGV[6])
if late then
  return {2, '', -1, now, 0}
end
local ttl = tonumber(ARGV[3])
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, cur, -1, now, 0}
end
-- Free, with no reservation, shared holder or queue: the plain take.
local plain = not cur and redis.call('EXISTS', KEYS[3], KEYS[5], KEYS[6]) == 0
local live, own = {}, nil
if not plain and redis.call('EXISTS', KEYS[6]) == 1 then
  live, own = queue(KEYS[6], KEYS[7], ARGV[7], now, ARGV[1], ARGV[8], ttl)
end
local function wait(value, pttl, why)
  enqueue(KEYS[6], own, 'w', ARGV[1], ARGV[2], now, ttl, math.floor(ttl * 3 / 2))
  return {0, value, pttl, now, why}
end
if cur then
  if #live > 0 then
    return wait(cur, redis.call('PTTL', KEYS[1]), 0)
  end
  return {0, cur, redis.call('PTTL', KEYS[1]), now, 0}
end
if not plain then
  local left = reserved(KEYS[3], ARGV[2])
  if left then
    return {0, '', left, now, 0}
  end
  local reader, last = live_readers(KEYS[5], now)
  if reader then
    return wait(reader, last - now, 3)
  end
  local first = ahead(live, own, false)
  if first then
    return wait('', cutoff_left(KEYS[6], first, now, ttl), 4)
  end
end
local floor = tonumber(ARGV[4])
if floor > 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], floor)
  local fenced = 'quarantine|' .. floor .. '|'
  redis.call('SET', KEYS[1], fenced, 'PX', ARGV[3])
  return {0, fenced, ttl, now, 0}
end
local token = redis.call('INCR', KEYS[2])
if token <= floor then
  token = floor + 1
  redis.call('SET', KEYS[2], token)
end
local value = ARGV[1] .. token .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
redis.call('DEL', KEYS[4])
if own then
  dequeue(KEYS[6], ARGV[1])
end
if not plain then
  keep_queue(KEYS[6], KEYS[7], ttl)
end
redis.call('PUBLISH', ARGV[5], 'acquired|' .. value)
return {1, value, -1, now, 0}
