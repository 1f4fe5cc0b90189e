  let_queue_go(KEYS[5], tonumber(ARGV[3]))
  redis.call('PUBLISH', ARGV[2], 'released')
end
return released
