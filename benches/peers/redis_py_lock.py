"""Peer for the handover benchmark: one candidate using redis-py's Lock.

Prints `acquired <CLOCK_MONOTONIC ns>` when it holds the lock, holds it until
SIGTERM, then releases and exits. Usage: redis_py_lock.py URL NAME TTL_SECONDS
"""
import signal
import sys
import time

import redis

url, name, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
lock = redis.Redis.from_url(url).lock(name, timeout=ttl)  # default poll sleep: 0.1 s
while not stop:
    if lock.acquire(blocking=True, blocking_timeout=0.5):
        print(f"acquired {time.monotonic_ns()}", flush=True)
        while not stop:
            time.sleep(0.005)
        lock.release()
        sys.exit(0)
