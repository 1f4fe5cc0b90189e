local function incarnation(marker, settle_ms)
  local info = redis.call('INFO', 'server')
  local run_id = string.match(info, 'run_id:(%x+)') or ''
  if run_id ~= '' and redis.call('GET', marker) == run_id then
    return run_id, 2, 0
  end
  local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)') or '0')
  local now_us = tonumber(string.match(info, 'server_time_usec:(%d+)') or '0')
  local since_ms = (up - 1) * 1000 + math.floor((now_us % 1000000) / 1000)
  if since_ms >= settle_ms then
    return run_id, 1, 0
  end
  return run_id, 0, settle_ms - since_ms
end

local function catch_up(fence, marker, expected_run_id, counter, settle_ms)
  local run_id, state = incarnation(marker, settle_ms)
  if state == 1 and run_id == expected_run_id then
    if tonumber(redis.call('GET', fence) or '0') < tonumber(counter) then
      redis.call('SET', fence, counter)
    end
    redis.call('SET', marker, run_id)
    return 2
  end
  return state
end
