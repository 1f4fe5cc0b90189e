local released, left = 0, 0
if ARGV[7] ~= '' then
  left = dequeue(KEYS[4], ARGV[7])
end
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local waiting = ARGV[7] ~= '' and redis.call('EXISTS', KEYS[4]) == 1
  if ARGV[6] == '1' or waiting then
    redis.call('PUBLISH', ARGV[2], 'released|' .. cur)
  end
  released = 1
elseif left > 0 then
  redis.call('PUBLISH', ARGV[2], 'released')
end
if ARGV[3] ~= '' then
  catch_up(KEYS[2], KEYS[3], ARGV[3], ARGV[4], tonumber(ARGV[5]))
end
return released
