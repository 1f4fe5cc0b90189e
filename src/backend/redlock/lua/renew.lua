local run_id, state = incarnation(KEYS[3], tonumber(ARGV[3]))
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
local late, now = too_late(ARGV[4])
if late then
  return {2, state, fence, run_id, now}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2])
  keep_queue(KEYS[5], KEYS[6], tonumber(ARGV[2]))
  return {1, state, fence, run_id, now}
end
return {0, state, fence, run_id, now}
