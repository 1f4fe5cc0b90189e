local run_id, state, settle_left = incarnation(KEYS[3], tonumber(ARGV[4]))
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
local late, now = too_late(ARGV[5])
if late then
  return {2, '', -1, fence, state, settle_left, run_id, now, {}}
end
local ttl = tonumber(ARGV[3])
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, cur, -1, fence, state, settle_left, run_id, now, {}}
end
local reader, last = live_readers(KEYS[5], now)
local shown = redis.call('ZRANGE', KEYS[5], 0, tonumber(ARGV[11]) - 1)
local queued = reader ~= nil or ARGV[10] == '1' or redis.call('EXISTS', KEYS[6]) == 1
local live = {}
if queued then
  live = queue(KEYS[6], KEYS[7], ARGV[8], now, ARGV[7], ARGV[9])
end
local function kept(value, pttl, code)
  if queued then
    enqueue(KEYS[6], ARGV[6], 'w', '', '', now, ttl)
  end
  return {code or 0, value, pttl, fence, state, settle_left, run_id, now, shown}
end
if cur then
  return kept(cur, redis.call('PTTL', KEYS[1]))
end
local left = reserved(KEYS[4], ARGV[2])
if left then
  return kept('', left)
end
if reader then
  return kept(reader, last - now, 3)
end
if queued then
  local first = before(live, ARGV[6], false)
  if first then
    return kept('', lapse_left(KEYS[6], KEYS[7], first, now))
  end
  dequeue(KEYS[6], ARGV[7])
end
local token = math.max(fence, tonumber(ARGV[12] or '0')) + 1
redis.call('SET', KEYS[2], string.format('%d', token))
local value = ARGV[1] .. string.format('%d', token) .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
keep_queue(KEYS[6], KEYS[7], ttl)
return {1, value, -1, token, state, settle_left, run_id, now, shown}
