"""emq-worker: serve queues with a Python function.

    emq-worker --broker tcp://127.0.0.1:47291 myapp.jobs:send_email --queue email --slots 16

The function takes an emq.Job and returns the REPLY's payload (bytes, str,
None, or anything json.dumps takes); an exception FAILs the job. SIGTERM
or SIGINT stops gracefully: no new jobs, running ones get --grace seconds.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from typing import Any, Callable, List, Optional

from .worker import Worker


def load(spec: str) -> Callable[..., Any]:
    """The function that "module:function" names (dots for attributes)."""
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"{spec!r} is not module:function")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as python -m does: the app's modules beside it
    obj: Any = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec} is not callable")
    return obj


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="emq-worker", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("handler", help="the function that runs each job: module:function")
    p.add_argument("--broker", default=os.environ.get("EMQ_BROKER", "tcp://127.0.0.1:47291"),
                   help="the broker's backend; several comma-separated for a group (default: $EMQ_BROKER or %(default)s)")
    p.add_argument("--queue", "-q", action="append", dest="queues", metavar="NAME[:WEIGHT]",
                   help="a queue to serve; repeat for more (default: default)")
    p.add_argument("--slots", type=int, default=1, help="jobs run at once (default 1)")
    p.add_argument("--grace", type=float, default=30.0, help="seconds running jobs get at stop (default 30)")
    p.add_argument("--heartbeat-interval", type=float, default=1.0, help="seconds between heartbeats (default 1)")
    p.add_argument("--heartbeat-timeout", type=float, default=3.0,
                   help="redial when the broker is silent this long (default 3)")
    p.add_argument("--interrupt", action="store_true",
                   help="raise emq.JobCancelled inside a handler whose job is cancelled (else it sets job.cancelled)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    try:
        fn = load(a.handler)
    except (ImportError, AttributeError, ValueError) as e:
        p.error(f"cannot load {a.handler}: {e}")
    queues = []
    for q in a.queues or ["default"]:
        name, sep, weight = q.rpartition(":")
        if sep and weight.isdigit() and name:
            queues.append((name, int(weight)))
        else:
            queues.append(q)
    try:
        w = Worker(a.broker, slots=a.slots, queues=queues, grace=a.grace, heartbeat_interval=a.heartbeat_interval,
                   heartbeat_timeout=a.heartbeat_timeout, interrupt_on_cancel=a.interrupt)
    except ValueError as e:
        p.error(str(e))
    w.handle("*", fn)

    def stop(signum: int, _frame: Any) -> None:
        logging.getLogger("emq.worker").info("emq-worker: %s; stopping gracefully", signal.Signals(signum).name)
        w.stop(wait=False)
        signal.signal(signum, signal.SIG_DFL)  # a second signal ends at once

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    w.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
