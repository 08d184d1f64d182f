"""Benchmarks of the Python package against a real broker, beside the Go
client's figures in the same run.

    /usr/bin/python3 bench.py                # both, default sizes
    /usr/bin/python3 bench.py --profile      # and a cProfile of each Python part

1. send 1:1: Client.send one job at a time (each waits for its ACK, so
   each is one fsync at the broker), then `emq bench --senders 1 --window 1
   --ack-only` (the Go client, 1:1) on the same broker. --rounds N takes
   turns N times and gives the medians, for a machine that is not quiet.
2. worker: --jobs jobs preloaded with Client.bulk, then a Worker with
   --slots slots of empty handlers runs them; jobs/s until the broker
   has every REPLY.

The broker is the emq binary named by EMQ_BIN, else built with go build,
on free loopback ports with its journal in a temp dir.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pathlib
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))
sys.path.insert(0, str(HERE / "tests"))

import emq  # noqa: E402
from conftest import Broker  # noqa: E402


def stats(b: Broker) -> dict:
    with urllib.request.urlopen(b.admin + "/api/v1/stats", timeout=5) as r:
        return json.loads(r.read())


def profiled(enabled: bool, name: str, fn):  # type: ignore[no-untyped-def]
    if not enabled:
        return fn()
    p = cProfile.Profile()
    p.enable()
    try:
        return fn()
    finally:
        p.disable()
        print(f"--- cProfile of {name} (this thread; the connection's thread is not in it) ---")
        pstats.Stats(p).sort_stats("cumulative").print_stats(15)


def raw_sends(b: Broker, n: int, payload: bytes) -> float:
    """What Python pays at the least for a 1:1 send: no thread, no resend."""
    import zmq
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.connect(b.frontend)
    t = time.perf_counter()
    for _ in range(n):
        s.send_multipart([b"", b"eMQP/1.0", b"REQUEST", emq.new_id().encode(), b"rawsend", b"", payload])
        s.recv_multipart()
    rate = n / (time.perf_counter() - t)
    s.close(0)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sends", type=int, default=3000, help="jobs of the 1:1 runs (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=50000, help="jobs of the worker run (default %(default)s)")
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--rounds", type=int, default=1, help="1:1 runs, Python and Go in turns (default %(default)s)")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="emq-pybench-"))
    emq_bin = os.environ.get("EMQ_BIN")
    if not emq_bin:
        emq_bin = str(tmp / "emq")
        subprocess.run(["go", "build", "-o", emq_bin, "./cmd/emq"], cwd=HERE.parents[1], check=True)
    b = Broker(emq_bin, str(tmp), ["--log-level", "error"])
    b.start()
    payload = b"x" * a.size
    try:
        with emq.Client(b.frontend, timeout=30) as c:
            for _ in range(200):  # warm-up
                c.send("warm", payload)

            def sends() -> float:
                t = time.perf_counter()
                for _ in range(a.sends):
                    c.send("pysend", payload)
                return a.sends / (time.perf_counter() - t)
            go_cmd = [emq_bin, "bench", "--frontend", b.frontend, "--backend", b.backend, "--senders", "1",
                      "--window", "1", "--ack-only", "--jobs", str(a.sends), "--size", str(a.size),
                      "--queue", "gosend", "--json", "--quiet"]
            pys, gos, raws = [], [], []
            for r in range(a.rounds):
                pys.append(profiled(a.profile and r == 0, "Client.send 1:1", sends))
                raws.append(raw_sends(b, a.sends, payload))
                go = json.loads(subprocess.run(go_cmd, capture_output=True, text=True, check=True).stdout)
                gos.append(go.get("jobs_per_sec") or go.get("jobs_per_second") or go.get("rate"))
                if a.rounds > 1:
                    print(f"round {r + 1}: python {pys[-1]:,.0f}  go {gos[-1]:,.0f}  bare pyzmq {raws[-1]:,.0f} jobs/s"
                          f"  python/go = {pys[-1] / gos[-1]:.2f}", flush=True)
            py, go_rate, raw = statistics.median(pys), statistics.median(gos), statistics.median(raws)
            ratio = statistics.median(p / g for p, g in zip(pys, gos))
            each = f"medians of {a.rounds} rounds, " if a.rounds > 1 else ""
            print(f"send 1:1  {each}python Client.send: {py:,.0f} jobs/s   go client (emq bench 1:1): "
                  f"{go_rate:,.0f} jobs/s   python/go = {ratio:.2f}")
            print(f"          go: {' '.join(go_cmd[1:])}")
            print(f"          the floor: one thread, a bare pyzmq DEALER, REQUEST then wait for its ACK: {raw:,.0f} jobs/s")

            # The worker: preload, then run.
            for i in range(0, a.jobs, 10000):
                c.bulk("pywork", [payload] * min(10000, a.jobs - i), timeout=120)
        before = stats(b)["replied"]
        w = emq.Worker(b.backend, slots=a.slots)
        w.handle("pywork", lambda job: None)

        def work() -> float:
            t = time.perf_counter()
            w.start()
            end = time.monotonic() + 600
            while stats(b)["replied"] - before < a.jobs and time.monotonic() < end:
                time.sleep(0.05)  # a poll of the broker's count, not a synchronisation
            return a.jobs / (time.perf_counter() - t)
        rate = profiled(a.profile, "Worker", work)
        w.stop()
        print(f"worker    {a.slots} slots, empty handlers, {a.jobs} jobs preloaded: {rate:,.0f} jobs/s")
    finally:
        b.stop()
        b.log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
