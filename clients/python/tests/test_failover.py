"""Crashes and takeovers: a SIGKILLed broker restarted on its data, and a
replicated group (etcd) whose leader is SIGKILLed while jobs flow. Every
msgid send() returned must run; jobs not ACKed are resent with their
msgids until a broker stores them."""

from __future__ import annotations

import threading
from typing import Callable, Dict, List

import emq
from conftest import Broker, Etcd, eventually
from test_client import Ran, serving


class Sender(threading.Thread):
    """Sends jobs one after another until stopped; keeps each ACKed msgid."""

    def __init__(self, c: emq.Client, queue: str) -> None:
        super().__init__(daemon=True)
        self.c, self.queue = c, queue
        self.acked: List[str] = []
        self.errors: List[BaseException] = []
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            try:
                self.acked.append(self.c.send(self.queue, f"job {i}", timeout=60))
            except BaseException as e:  # noqa: B902 - reported by the test
                self.errors.append(e)
                return
            i += 1

    def count(self) -> int:
        return len(self.acked)


def test_sigkilled_broker_runs_every_acked_job_after_restart(start_broker: Callable[..., Broker]) -> None:
    b = start_broker()
    ran = Ran()
    with emq.Client(b.frontend, timeout=60, resend_after=1.0) as c:
        before = [c.send("crash", f"before {i}") for i in range(50)]
        s = Sender(c, "crash")
        s.start()
        eventually(lambda: s.count() >= 20, 20, "jobs flowing")
        b.kill()  # SIGKILL: what was ACKed is in the journal; what was not is resent
        at_kill = s.count()
        b.start()
        eventually(lambda: s.count() >= at_kill + 20, 30, "jobs ACKed again after the restart")
        s.halt.set()
        s.join(60)
        assert not s.errors, s.errors
        with serving(b.backend, {"crash": ran.add}, slots=8):
            eventually(lambda: ran.has(before + s.acked), 30, "every ACKed job run")


def test_group_failover_keeps_msgids(start_broker: Callable[..., Broker], etcd: Etcd) -> None:
    group = ["--etcd-endpoints", etcd.client, "--leader-ttl", "2s"]
    a = start_broker(group + ["--etcd-name", "a"], name="a", wait=False)
    b = start_broker(group + ["--etcd-name", "b"], name="b", wait=False)
    brokers = {"a": a, "b": b}

    def leader() -> str:
        for n, x in brokers.items():
            if x.role() == "leader" and x.ready():
                return n
        return ""
    first = str(eventually(leader, 60, "a leader"))
    other = "b" if first == "a" else "a"
    ran = Ran()
    frontends = [a.frontend, b.frontend]
    with emq.Client(frontends, timeout=60, resend_after=1.0) as c, \
            serving([a.backend, b.backend], {"ha": ran.add}, slots=8):
        s = Sender(c, "ha")
        s.start()
        eventually(lambda: s.count() >= 20, 20, "jobs flowing")
        brokers[first].kill()
        at_kill = s.count()
        eventually(lambda: brokers[other].role() == "leader", 60, f"broker {other} takes over")
        eventually(lambda: s.count() >= at_kill + 20, 60, "jobs ACKed by the new leader")
        s.halt.set()
        s.join(60)
        assert not s.errors, s.errors
        eventually(lambda: ran.has(s.acked), 60, "every ACKed job run, on the new leader")
    # A job the killed leader had ACKed, run once or again (at least once);
    # none lost.
    runs: Dict[str, List[bytes]] = ran.runs
    assert all(runs[i] for i in s.acked)


def test_client_waits_for_a_broker_that_starts_late(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(wait=False)
    b.kill()  # its ports known, nothing listening yet
    out: List[str] = []
    with emq.Client(b.frontend, timeout=60) as c:
        t = threading.Thread(target=lambda: out.append(c.send("late", b"x")))
        t.start()
        b.start()
        t.join(60)
        assert len(out) == 1
