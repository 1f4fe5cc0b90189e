local late, now = too_late(ARGV[3])
if late then
  return {2, now}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[2] then
    redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  end
  if KEYS[4] then
    keep_queue(KEYS[3], KEYS[4], tonumber(ARGV[2]))
  end
  return {1, now}
end
return {0, now}
