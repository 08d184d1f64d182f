"""Client and Worker against a real broker (the emq binary, a child
process on loopback ports)."""

from __future__ import annotations

import threading
import time
import urllib.error
import contextlib
from typing import Any, Callable, Dict, Iterator, List

import pytest

import emq
from conftest import Broker, eventually, http_json


class Ran:
    """What a worker ran: msgid -> payloads, one per run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: Dict[str, List[bytes]] = {}

    def add(self, job: emq.Job) -> None:
        with self.lock:
            self.runs.setdefault(job.msgid, []).append(job.payload)

    def has(self, ids: List[str]) -> bool:
        with self.lock:
            return all(i in self.runs for i in ids)


@contextlib.contextmanager
def serving(backend: str, handlers: Dict[str, Callable[[emq.Job], object]], **kw: Any) -> Iterator[emq.Worker]:
    """A Worker with handlers, running until the block ends."""
    w = emq.Worker(backend, **kw)
    for q, h in handlers.items():
        w.handle(q, h)
    w.start()
    try:
        yield w
    finally:
        assert w.stop(timeout=30), "the worker stopped"


def job_state(b: Broker, msgid: str) -> Dict[str, object]:
    try:
        return http_json(f"{b.admin}/api/v1/jobs/{msgid}")  # type: ignore[return-value]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return {}
        raise


def test_send_request_and_headers(broker: Broker) -> None:
    ran = Ran()
    headers: Dict[str, Dict[str, str]] = {}

    def email(job: emq.Job) -> bytes:
        ran.add(job)
        headers[job.msgid] = job.headers
        return b"sent " + job.payload

    with emq.Client(broker.frontend, timeout=10) as c, serving(broker.backend, {"email": email}, slots=4):
        ids = [c.send("email", f"to {i}", priority=5, tenant="acme", headers={"x-app": "shop"}) for i in range(20)]
        assert len(set(ids)) == 20
        eventually(lambda: ran.has(ids), 10, "every job sent run")
        assert all(ran.runs[i] == [f"to {n}".encode()] for n, i in enumerate(ids))
        h = headers[ids[0]]
        assert (h["priority"], h["tenant"], h["x-app"]) == ("5", "acme", "shop")

        assert c.request("email", b"ana", timeout=10) == b"sent ana"
        # A msgid of one's own: sent twice, stored and run once.
        mine = emq.new_id()
        assert c.send("email", b"once", msgid=mine) == mine
        eventually(lambda: ran.has([mine]), 10, "the job with our msgid run")
        assert ran.runs[mine] == [b"once"]


def test_threads_share_a_client(broker: Broker) -> None:
    # Senders that take turns on the socket themselves (a caller alone
    # does), and requests that wait for REPLYs on the client's thread:
    # each gets its own answer, whoever read it.
    ran = Ran()

    def echo(job: emq.Job) -> bytes:
        ran.add(job)
        return job.payload

    sent: List[str] = []
    replies: List[bool] = []
    errors: List[BaseException] = []

    def sender(n: int) -> None:
        try:
            for i in range(100):
                sent.append(c.send("share", f"{n} {i}"))
        except BaseException as e:  # noqa: B902 - reported by the test
            errors.append(e)

    def requester(n: int) -> None:
        try:
            for i in range(20):
                replies.append(c.request("share", f"r{n} {i}") == f"r{n} {i}".encode())
        except BaseException as e:  # noqa: B902 - reported by the test
            errors.append(e)

    with emq.Client(broker.frontend, timeout=30) as c, serving(broker.backend, {"share": echo}, slots=8):
        threads = [threading.Thread(target=sender, args=(n,)) for n in range(6)]
        threads += [threading.Thread(target=requester, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert len(set(sent)) == 600 and replies == [True] * 40
        eventually(lambda: ran.has(sent), 30, "every job sent run")


def test_broker_errors_carry_the_code(start_broker: Callable[..., Broker]) -> None:
    broker = start_broker(["--retain-done", "1m"])  # a cancelled job kept: a second cancel is a conflict
    with emq.Client(broker.frontend, timeout=10) as c:
        with pytest.raises(emq.BadRequestError) as bad:
            c.send("q", b"", headers={"priority": "soon"})
        assert bad.value.code == "bad_request" and "priority" in bad.value.text
        held = c.send("q", b"a", unique="user-42")
        with pytest.raises(emq.DuplicateError) as dup:
            c.send("q", b"b", unique="user-42")
        assert dup.value.code == "duplicate" and dup.value.holder == held
        with pytest.raises(emq.NotFoundError):
            c.cancel(emq.new_id())
        c.cancel(held)
        with pytest.raises(emq.ConflictError):
            c.cancel(held)
        with pytest.raises(ValueError):
            c.send("", b"x")


def test_timeout_names_a_broker_that_is_not_there() -> None:
    from conftest import free_port
    with emq.Client(f"tcp://127.0.0.1:{free_port()}", timeout=0.3) as c:
        with pytest.raises(emq.Timeout) as e:
            c.send("q", b"x")
        assert not e.value.stored and "is it running" in str(e.value)


def test_bulk_all_or_none(broker: Broker) -> None:
    ran = Ran()
    with emq.Client(broker.frontend, timeout=10) as c:
        ids = c.bulk("jobs", [b"a", "b", emq.BulkJob(b"c", queue="other", headers={"priority": 1})])
        assert len(ids) == 3
        held = c.send("jobs", b"held", unique="k")
        first = emq.new_id()
        with pytest.raises(emq.BulkError) as e:
            c.bulk("jobs", [emq.BulkJob(b"fine", msgid=first), emq.BulkJob(b"dup", headers={"unique": "k"})])
        assert (e.value.code, e.value.index) == ("duplicate", 1)
        with pytest.raises(emq.NotFoundError):
            c.cancel(first)  # the bulk's first job was not stored either
        with serving(broker.backend, {"*": ran.add}, slots=2, queues=["jobs", "other"]):
            eventually(lambda: ran.has(ids + [held]), 10, "every bulk job run")
        assert [ran.runs[i] for i in ids] == [[b"a"], [b"b"], [b"c"]]


def test_cancel_reaches_the_running_handler(start_broker: Callable[..., Broker]) -> None:
    broker = start_broker(["--retain-done", "1m"])
    started, outcome = threading.Event(), {}

    def slow(job: emq.Job) -> bytes:
        started.set()
        outcome["cancelled"] = job.cancelled.wait(20)
        job.raise_if_cancelled()
        return b"finished"

    with emq.Client(broker.frontend, timeout=10) as c, serving(broker.backend, {"slow": slow}, slots=2):
        msgid = c.send("slow", b"x")
        eventually(started.is_set, 10, "the handler started")
        c.cancel(msgid)
        eventually(lambda: "cancelled" in outcome, 10, "the handler saw the cancel")
        assert outcome["cancelled"] is True
        eventually(lambda: job_state(broker, msgid).get("state") == "cancelled", 10, "the job cancelled")


def test_cancel_interrupts_a_handler_that_does_not_look(broker: Broker) -> None:
    started, outcome = threading.Event(), []

    def busy(job: emq.Job) -> bytes:
        if job.payload == b"next":
            return b"next"
        started.set()
        end = time.monotonic() + 20
        try:
            while time.monotonic() < end:  # busy, never checking job.cancelled
                sum(range(100))
        except emq.JobCancelled:
            outcome.append("interrupted")
            raise
        outcome.append("ran out")
        return b""

    with emq.Client(broker.frontend, timeout=10) as c, \
            serving(broker.backend, {"busy": busy}, slots=1, interrupt_on_cancel=True):
        msgid = c.send("busy", b"x")
        eventually(started.is_set, 10, "the handler started")
        c.cancel(msgid)
        eventually(lambda: outcome, 10, "the handler ended")
        assert outcome == ["interrupted"]
        # The slot is free again: the next job runs.
        assert c.request("busy", b"next", timeout=10) == b"next"


def test_progress_reaches_the_broker(broker: Broker) -> None:
    go = threading.Event()

    def resize(job: emq.Job) -> None:
        job.progress(40, "resized 4 of 10")
        go.wait(20)

    with emq.Client(broker.frontend, timeout=10) as c, serving(broker.backend, {"resize": resize}, slots=1):
        msgid = c.send("resize", b"x")
        try:
            eventually(lambda: "40" in str(job_state(broker, msgid).get("progress", "")), 10, "progress at the broker")
        finally:
            go.set()


def test_schedule_makes_jobs_until_unscheduled(broker: Broker) -> None:
    ran = Ran()
    with emq.Client(broker.frontend, timeout=10) as c, serving(broker.backend, {"tick": ran.add}, slots=1):
        c.schedule("tick", b"beat", every=1, schedule_id="beat")
        eventually(lambda: len(ran.runs) >= 2, 10, "two scheduled jobs run")
        c.unschedule("tick", b"beat", schedule_id="beat")


def test_publish_reaches_a_subscriber(broker: Broker) -> None:
    with emq.Client(broker.frontend) as c, emq.Subscriber(broker.publisher, "orders.") as s:
        got: List[emq.Message] = []

        def published() -> bool:  # a SUB joins a moment after it connects: publish until one arrives
            c.publish("orders.new", b"42")
            c.publish("other", b"no")
            m = s.recv(timeout=0.1)
            if m is not None:
                got.append(m)
            return bool(got)
        eventually(published, 10, "a published message received")
        assert got[0] == emq.Message(b"orders.new", b"42")


def test_worker_stops_gracefully(broker: Broker) -> None:
    release, started = threading.Event(), threading.Event()
    replies: List[bytes] = []
    with emq.Client(broker.frontend, timeout=20) as c:
        w = emq.Worker(broker.backend, slots=1, grace=30)

        @w.handle("long")
        def long(job: emq.Job) -> bytes:
            started.set()
            release.wait(20)
            return b"done " + job.payload

        w.start()
        t = threading.Thread(target=lambda: replies.append(c.request("long", b"first")))
        t.start()
        eventually(started.is_set, 10, "the first job started")
        assert not w.stop(wait=False)
        later = c.send("long", b"second")  # sent while the worker stops: not taken
        release.set()
        assert w.stop(timeout=20), "the worker stopped"
        t.join(10)
        assert replies == [b"done first"]  # the running job finished and answered
        # The job sent meanwhile waits for another worker.
        ran = Ran()
        with serving(broker.backend, {"long": ran.add}, slots=1):
            eventually(lambda: ran.has([later]), 10, "the second job run by the next worker")


def test_emq_worker_command_serves_and_stops_on_sigterm(broker: Broker, tmp_path: Any) -> None:
    import os
    import signal
    import subprocess
    import sys
    (tmp_path / "myjobs.py").write_text("def shout(job):\n    return job.payload.upper()\n")
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(tmp_path)]))
    p = subprocess.Popen([sys.executable, "-m", "emq.cli", "--broker", broker.backend, "myjobs:shout",
                          "--queue", "cli", "--slots", "4"], env=env, stderr=subprocess.PIPE)
    try:
        with emq.Client(broker.frontend, timeout=20) as c:
            assert c.request("cli", b"hello") == b"HELLO"
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0
        assert b"stopped" in (p.stderr.read() if p.stderr else b"")
    finally:
        if p.poll() is None:
            p.kill()
