local function before(live, entry, writers)
  for _, m in ipairs(live) do
    if m >= entry then
      return nil
    end
    if not writers or string.match(m, '^%d+|w|') then
      return m
    end
  end
  return nil
end
