local prefix = ARGV[1]
local function mine(v)
  return string.sub(v, 1, #prefix) == prefix
end
if dequeue(KEYS[3], prefix) > 0 then
  redis.call('PUBLISH', ARGV[2], 'released')
end
local cur = redis.call('GET', KEYS[1])
local released, free = 0, false
if cur and mine(cur) then
  redis.call('DEL', KEYS[1])
  released, free = 1, true
end
for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if mine(m) then
    redis.call('ZREM', KEYS[2], m)
    released = 1
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', store_ms())
    free = redis.call('ZCARD', KEYS[2]) == 0 and not redis.call('GET', KEYS[1])
  end
end
if free then
