local function live_readers(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local first = redis.call('ZRANGE', key, 0, 0)
  if #first == 0 then
    return nil, now
  end
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return first[1], tonumber(last[2])
end
