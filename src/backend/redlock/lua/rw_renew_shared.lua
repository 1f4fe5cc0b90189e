local run_id, state = incarnation(KEYS[3], tonumber(ARGV[3]))
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
local late, now = too_late(ARGV[4])
if late then
  return {2, state, fence, run_id, now}
end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now and not redis.call('GET', KEYS[4]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  keep_queue(KEYS[5], KEYS[6], tonumber(ARGV[2]))
  return {1, state, fence, run_id, now}
end
return {0, state, fence, run_id, now}
