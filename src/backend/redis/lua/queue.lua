local function stale(lapse, now, ttl)
  return ttl ~= nil and lapse + math.floor(ttl * 9 / 2) <= now
end
local function cutoff_left(waits, m, now, ttl)
  return tonumber(redis.call('ZSCORE', waits, m)) + math.floor(ttl * 9 / 2) - now
end
local function queue(waits, busy, presence, now, me, channel, ttl)
  local held = redis.call('EXISTS', busy) == 1
  local live, own, dropped = {}, nil, false
  local all = redis.call('ZRANGE', waits, 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    local m, lapse = all[i], tonumber(all[i + 1])
    local arrival, nonce, id = string.match(m, '^(%d+)|%a|([^|]*)|(.*)$')
    local mine = nonce ~= nil and nonce .. '|' == me
    local gone = arrival == nil or (lapse <= now and not held) or stale(lapse, now, ttl)
    if not gone and not mine and tonumber(arrival) < (now - 1000) * 1000 then
      gone = redis.call('PUBSUB', 'NUMSUB', presence .. id)[2] == 0
    end
    if gone then
      redis.call('ZREM', waits, m)
      dropped = true
    else
      live[#live + 1] = m
      if mine then
        own = m
      end
    end
  end
  if dropped then
    redis.call('PUBLISH', channel, 'released')
  end
  table.sort(live)
  return live, own
end
local function ahead(live, own, writers)
  for _, m in ipairs(live) do
    if m == own then
      return nil
    end
    if not writers or string.match(m, '^%d+|w|') then
      return m
    end
  end
  return nil
end
local function enqueue(waits, own, kind, me, id, now, ttl, life)
  if not own then
    local t = redis.call('TIME')
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    own = string.format('%016d', us) .. '|' .. kind .. '|' .. me .. id
  end
  redis.call('ZADD', waits, now + (life or 2 * ttl), own)
  return own
end
local function dequeue(waits, me)
  local gone = 0
  for _, m in ipairs(redis.call('ZRANGE', waits, 0, -1)) do
    if string.find(m, '|' .. me, 1, true) then
      gone = gone + redis.call('ZREM', waits, m)
    end
  end
  return gone
end
local function lapse_left(waits, busy, m, now)
  local left = tonumber(redis.call('ZSCORE', waits, m)) - now
  return math.max(left, redis.call('PTTL', busy))
end
local function keep_queue(waits, busy, ttl)
  if redis.call('EXISTS', waits) == 1 then
    redis.call('SET', busy, '1', 'PX', 2 * ttl)
  end
end
local function check_heads(waits, presence, now, k, channel, ttl)
  local all, lapses = {}, {}
  local scored = redis.call('ZRANGE', waits, 0, -1, 'WITHSCORES')
  for i = 1, #scored, 2 do
    all[#all + 1] = scored[i]
    lapses[scored[i]] = tonumber(scored[i + 1])
  end
  table.sort(all)
  local dropped = false
  for i = 1, math.min(k, #all) do
    local arrival, id = string.match(all[i], '^(%d+)|%a|[^|]*|(.*)$')
    local gone = arrival == nil or stale(lapses[all[i]], now, ttl)
    if not gone and tonumber(arrival) < (now - 1000) * 1000 then
      gone = redis.call('PUBSUB', 'NUMSUB', presence .. id)[2] == 0
    end
    if gone then
      redis.call('ZREM', waits, all[i])
      dropped = true
    end
  end
  if dropped then
    redis.call('PUBLISH', channel, 'released')
  end
end
local function let_queue_go(busy, ttl)
  local keep = math.floor(ttl / 2)
  if redis.call('PTTL', busy) > keep then
    redis.call('PEXPIRE', busy, math.max(keep, 1))
  end
end
