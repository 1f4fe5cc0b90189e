local run_id, state, settle_left = incarnation(KEYS[3], tonumber(ARGV[4]))
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
local late, now = too_late(ARGV[5])
if late then
  return {2, '', -1, fence, state, settle_left, run_id, now, {}}
end
local ttl, prefix = tonumber(ARGV[3]), ARGV[1]
local reader = live_readers(KEYS[5], now)
local shown = redis.call('ZRANGE', KEYS[5], 0, tonumber(ARGV[11]) - 1)
for _, m in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  if string.sub(m, 1, #prefix) == prefix then
    redis.call('ZADD', KEYS[5], now + ttl, m)
    dequeue(KEYS[6], ARGV[7])
    return {1, m, -1, fence, state, settle_left, run_id, now, shown}
  end
end
local live = {}
if redis.call('EXISTS', KEYS[6]) == 1 then
  live = queue(KEYS[6], KEYS[7], ARGV[8], now, ARGV[7], ARGV[9])
end
local function kept(value, pttl, code)
  enqueue(KEYS[6], ARGV[6], 'r', '', '', now, ttl)
  return {code or 0, value, pttl, fence, state, settle_left, run_id, now, shown}
end
local cur = redis.call('GET', KEYS[1])
if cur then
  return kept(cur, redis.call('PTTL', KEYS[1]))
end
local left = reserved(KEYS[4], ARGV[2])
if left then
  return kept('', left)
end
local first = before(live, ARGV[6], true)
if first and reader then
  return kept(reader, lapse_left(KEYS[6], KEYS[7], first, now), 3)
elseif first then
  return kept('', lapse_left(KEYS[6], KEYS[7], first, now))
end
dequeue(KEYS[6], ARGV[7])
local value = prefix .. 'pending|' .. ARGV[2]
redis.call('ZADD', KEYS[5], now + ttl, value)
keep_queue(KEYS[6], KEYS[7], ttl)
return {1, value, -1, fence, state, settle_left, run_id, now, shown}
