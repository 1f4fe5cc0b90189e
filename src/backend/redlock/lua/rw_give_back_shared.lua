local left = 0
if ARGV[7] ~= '' then
  left = dequeue(KEYS[4], ARGV[7])
end
local released = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(m, 1, #ARGV[1]) == ARGV[1] then
    redis.call('ZREM', KEYS[1], m)
    released = 1
  end
end
if released == 1 and ARGV[7] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', store_ms())
  if redis.call('ZCARD', KEYS[1]) == 0 and not redis.call('GET', KEYS[5]) then
    redis.call('PUBLISH', ARGV[2], 'released|')
  end
elseif left > 0 then
  redis.call('PUBLISH', ARGV[2], 'released')
end
if ARGV[3] ~= '' then
  catch_up(KEYS[2], KEYS[3], ARGV[3], ARGV[4], tonumber(ARGV[5]))
end
return released
