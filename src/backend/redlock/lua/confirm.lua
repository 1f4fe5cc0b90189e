local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
  local token = tonumber(ARGV[2])
  if tonumber(redis.call('GET', KEYS[2]) or '0') < token then
    redis.call('SET', KEYS[2], token)
  end
  local _, state = incarnation(KEYS[3], tonumber(ARGV[5]))
  if ARGV[6] ~= '' then
    state = catch_up(KEYS[2], KEYS[3], ARGV[6], ARGV[2], tonumber(ARGV[5]))
  end
  redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
  redis.call('PUBLISH', ARGV[4], 'acquired|' .. ARGV[3])
  return {1, state}
end
return {0, 0}
