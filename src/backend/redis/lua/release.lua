local cur = redis.call('GET', KEYS[1])
local mine = cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1]
if dequeue(KEYS[3], ARGV[1]) > 0 and not mine then
  redis.call('PUBLISH', ARGV[5], 'released')
end
if mine then
  redis.call('DEL', KEYS[1])
  let_queue_go(KEYS[4], tonumber(ARGV[4]))
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PUBLISH', ARGV[5], 'released')
  end
end
if ARGV[3] == 'all' then
  if mine then
    redis.call('PUBLISH', ARGV[2], 'released|' .. cur)
  end
elseif mine or not cur then
