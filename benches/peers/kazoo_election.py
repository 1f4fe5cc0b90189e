"""Peer for the handover benchmark: one candidate using kazoo's Election recipe.

Prints `leader <CLOCK_MONOTONIC ns>` when elected, leads until SIGTERM, then gives up
the election and closes its session. Usage: kazoo_election.py HOSTS PATH ID
"""
import signal
import sys
import threading
import time

from kazoo.client import KazooClient

hosts, path, ident = sys.argv[1], sys.argv[2], sys.argv[3]
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())

zk = KazooClient(hosts=hosts, timeout=4.0)
zk.start()
election = zk.Election(path, ident)


def lead():
    print(f"leader {time.monotonic_ns()}", flush=True)
    stop.wait()


runner = threading.Thread(target=election.run, args=(lead,), daemon=True)
runner.start()
stop.wait()
election.cancel()
runner.join(timeout=5)
zk.stop()
zk.close()
