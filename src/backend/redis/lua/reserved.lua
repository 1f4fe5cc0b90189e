local function reserved(key, me)
  local to = redis.call('GET', key)
  if to and to ~= me then
    return redis.call('PTTL', key)
  end
  if to then
    redis.call('DEL', key)
  end
  return nil
end
