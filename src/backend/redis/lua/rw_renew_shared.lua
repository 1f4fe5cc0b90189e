local late, now = too_late(ARGV[3])
if late then
  return {2, now}
end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now and not redis.call('GET', KEYS[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  keep_queue(KEYS[3], KEYS[4], tonumber(ARGV[2]))
  check_heads(KEYS[3], ARGV[4], now, 2, ARGV[5], tonumber(ARGV[2]))
  return {1, now}
end
return {0, now}
