return catch_up(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3]))
