local now = store_ms()
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(m, 1, #ARGV[1]) == ARGV[1] then
    local expiry = tonumber(redis.call('ZSCORE', KEYS[1], m))
    if expiry <= now then
      return {0, 0}
    end
    local token = tonumber(ARGV[2])
    if tonumber(redis.call('GET', KEYS[2]) or '0') < token then
      redis.call('SET', KEYS[2], token)
    end
    local _, state = incarnation(KEYS[3], tonumber(ARGV[5]))
    if ARGV[6] ~= '' then
      state = catch_up(KEYS[2], KEYS[3], ARGV[6], ARGV[2], tonumber(ARGV[5]))
    end
    if m ~= ARGV[3] then
      redis.call('ZREM', KEYS[1], m)
      redis.call('ZADD', KEYS[1], expiry, ARGV[3])
    end
    return {1, state}
  end
end
return {0, 0}
