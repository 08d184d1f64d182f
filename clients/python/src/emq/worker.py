"""The Worker: runs jobs from an EMQ broker (EventMQ's "job manager").

One thread (run's) owns the connection; handlers run on ``slots`` threads
of their own. The worker INFORMs the broker of its queues when a broker
greets, and offers one READY per free slot, never more, so no more than
``slots`` jobs run at once. A handler's return value becomes a REPLY, its
exception a FAIL (the broker retries the job up to its retry-count); each
finished job's READY follows its answer.

Heartbeats go both ways every heartbeat_interval. A broker silent for
heartbeat_timeout is left: the connection is made again (same routing id)
and the worker INFORMs whichever endpoint greets, offering its free slots
again; jobs running meanwhile finish, and their answers go once connected.

A CANCEL from the broker (an operator, or Client.cancel) sets the running
job's ``cancelled`` event; with interrupt_on_cancel the worker also raises
JobCancelled inside the handler. stop() is graceful: no more jobs taken,
running jobs get ``grace`` seconds to finish and answer, then the worker
says DISCONNECT and closes.
"""

from __future__ import annotations

import collections
import ctypes
import json
import logging
import queue as queue_mod
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple, Union

import zmq

from . import _wire
from ._transport import Dealer, Waker, endpoint_list
from .errors import ClosedError

log = logging.getLogger("emq.worker")

Result = Union[bytes, str, None, Any]
Handler = Callable[["Job"], Result]

_REQUEST, _CANCEL, _KBYE, _DISCONNECT, _ERROR = b"REQUEST", b"CANCEL", b"KBYE", b"DISCONNECT", b"ERROR"
_PROGRESS_GAP = 0.1  # at most 10 PROGRESS a second per job


class JobCancelled(Exception):
    """Raised inside a handler whose job the broker cancelled, when the
    Worker interrupts on cancel, or by Job.raise_if_cancelled."""


class Job:
    """One job handed to a handler."""

    __slots__ = ("msgid", "queue", "payload", "_raw_headers", "_headers", "cancelled", "started",
                 "_worker", "_lock", "_running", "_thread", "_ended", "_next_progress", "_pending")

    def __init__(self, msgid: str, queue: str, raw_headers: bytes, payload: bytes,
                 worker: Optional["Worker"] = None) -> None:
        self.msgid = msgid  #: the client's msgid: the same on every attempt
        self.queue = queue
        self.payload = payload
        self._raw_headers = raw_headers
        self._headers: Optional[Dict[str, str]] = None
        #: set when the broker cancels the job
        self.cancelled = threading.Event()
        self.started = time.monotonic()
        self._worker = worker
        self._lock = threading.Lock()
        self._running = False
        self._thread = 0
        self._ended = False
        self._next_progress = 0.0
        self._pending: Optional[str] = None

    @property
    def headers(self) -> Dict[str, str]:
        """The job's headers; a flag maps to ""."""
        if self._headers is None:
            try:
                self._headers = _wire.parse_headers(self._raw_headers)
            except _wire.ProtocolError:
                self._headers = {}
        return self._headers

    @property
    def attempt(self) -> int:
        """1 the first time, 2 the first retry, ..."""
        try:
            return max(1, int(self.headers.get("attempt", "1")))
        except ValueError:
            return 1

    @property
    def timeout(self) -> Optional[float]:
        """The job's timeout in seconds (its time at a worker), if it has one."""
        try:
            t = float(self.headers.get("timeout", "0"))
        except ValueError:
            return None
        return t if t > 0 else None

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        """Raises JobCancelled if the broker has cancelled the job."""
        if self.cancelled.is_set():
            raise JobCancelled(f"job {self.msgid} was cancelled")

    def progress(self, percent: int = -1, note: str = "") -> None:
        """Reports how far the job has come (PROGRESS "40 resizing"):
        percent 0-100 (above counts as 100, below 0 sends no number) and a
        short note. At most 10 reports a second go out; a newer one
        replaces one that waits for its turn. Nothing goes after the
        handler has returned, nor for a Job made outside a Worker."""
        text = note
        if percent >= 0:
            text = f"{min(percent, 100)} {note}" if note else str(min(percent, 100))
        b = text.encode(errors="replace")
        if len(b) > _wire.MAX_PROGRESS_LEN:
            text = b[:_wire.MAX_PROGRESS_LEN].decode(errors="ignore")
        if text and self._worker is not None:
            self._worker._progress(self, text)


def _async_raise(thread_id: int, exc: Optional[type]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


def _result(value: Result) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return json.dumps(value).encode()


class Worker:
    """Runs jobs from the broker's backend.

    endpoints: the broker's backend, tcp://host:port; several (a list, or
    comma-separated) for a replicated group: the one that serves answers.
    slots: jobs run at once. queues: the queues served, names or
    (name, weight) pairs, higher weight first; by default each queue given
    a handler, weight 10.
    """

    def __init__(self, endpoints: Union[str, Sequence[str]], *, slots: int = 1,
                 queues: Optional[Sequence[Union[str, Tuple[str, int]]]] = None,
                 heartbeat_interval: float = 1.0, heartbeat_timeout: float = 3.0, grace: float = 30.0,
                 identity: Optional[str] = None, interrupt_on_cancel: bool = False,
                 context: Optional[zmq.Context] = None) -> None:
        self.endpoints = endpoint_list(endpoints)
        if slots < 1:
            raise ValueError(f"slots must be 1 or more, not {slots}")
        if heartbeat_timeout <= heartbeat_interval:
            raise ValueError(f"heartbeat_timeout {heartbeat_timeout} must be longer than heartbeat_interval {heartbeat_interval}")
        self.slots = slots
        self.grace = grace
        self.identity = identity or _wire.new_id()
        self.interrupt_on_cancel = interrupt_on_cancel
        self._queues = queues
        self._hb = (heartbeat_interval, heartbeat_timeout)
        self._ctx = context or zmq.Context.instance()
        self._handlers: Dict[str, Handler] = {}
        self._waker = Waker()
        self._wake_pending = False
        self._stop_asked = False
        self._started = False
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._jobs: "queue_mod.SimpleQueue[Optional[Job]]" = queue_mod.SimpleQueue()
        self._results: Deque[Tuple[Job, List[bytes]]] = collections.deque()
        self._reports: Deque[Tuple[Job, str]] = collections.deque()
        self._report_lock = threading.Lock()
        self._waiting_reports: Set[Job] = set()
        self.connected = threading.Event()

    # -- configuration ------------------------------------------------------

    def handle(self, queue: str, handler: Optional[Handler] = None) -> Any:
        """Sets queue's handler: ``worker.handle("email", fn)``, or as a
        decorator, ``@worker.handle("email")``. The queue "*" takes the jobs
        of every queue served that has no handler of its own."""
        if not queue or len(queue.encode()) > _wire.MAX_QUEUE_LEN:
            raise ValueError(f"queue name {queue!r} must be 1 to {_wire.MAX_QUEUE_LEN} bytes of UTF-8")
        if handler is not None:
            self._handlers[queue] = handler
            return handler

        def register(fn: Handler) -> Handler:
            self._handlers[queue] = fn
            return fn
        return register

    register = handle

    def queues(self) -> List[Tuple[int, str]]:
        """The queues served as (weight, name), as INFORM sends them."""
        if self._queues:
            return [(_wire.DEFAULT_WEIGHT, q) if isinstance(q, str) else (int(q[1]), q[0]) for q in self._queues]
        return [(_wire.DEFAULT_WEIGHT, q) for q in self._handlers if q != "*"]

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> "Worker":
        """Runs the worker in a background thread; stop() ends it."""
        self._check()
        self._thread = threading.Thread(target=self.run, name="emq-worker", daemon=True)
        self._thread.start()
        return self

    def stop(self, wait: bool = True, timeout: Optional[float] = None) -> bool:
        """Stops gracefully: no more jobs taken, running jobs finish (for up
        to grace seconds, then their cancelled event is set) and answer,
        then DISCONNECT. Safe from a signal handler with wait=False.
        Returns whether the worker has stopped."""
        self._stop_asked = True
        self._waker.wake()
        if wait and self._started:
            return self._done.wait(timeout)
        return self._done.is_set()

    def __enter__(self) -> "Worker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check(self) -> None:
        if self._started:
            raise RuntimeError("a Worker runs once")
        if not self._handlers:
            raise ValueError("no handler: call handle(queue, fn) first")
        qs = self.queues()
        if not qs:
            raise ValueError("no queue to serve: give queues= or a handler of a named queue")
        for _, q in qs:
            if not q or len(q.encode()) > _wire.MAX_QUEUE_LEN:
                raise ValueError(f"queue name {q!r} must be 1 to {_wire.MAX_QUEUE_LEN} bytes of UTF-8")
            if q not in self._handlers and "*" not in self._handlers:
                raise ValueError(f"queue {q!r} has no handler: handle({q!r}, fn) or handle('*', fn)")

    def run(self) -> None:
        """Serves jobs until stop(), then stops gracefully and returns."""
        if threading.current_thread() is not self._thread:
            self._check()
        if self._stop_asked and self._started:
            raise ClosedError("the worker has stopped")
        self._started = True
        threads = [threading.Thread(target=self._slot, name=f"emq-slot-{i}", daemon=True) for i in range(self.slots)]
        for t in threads:
            t.start()
        try:
            self._serve()
        finally:
            for _ in threads:
                self._jobs.put(None)
            self.connected.clear()
            self._done.set()
            self._waker.close()

    # -- the slots ----------------------------------------------------------

    def _slot(self) -> None:
        while True:
            try:
                job = self._jobs.get()
                if job is None:
                    return
                self._run_job(job)
            except JobCancelled:
                pass  # an interrupt that came late: _run_job has answered

    def _run_job(self, job: Job) -> None:
        h = self._handlers.get(job.queue) or self._handlers.get("*")
        frames: Optional[List[bytes]] = None
        job._thread = threading.get_ident()
        with job._lock:
            job._running = True
        try:
            try:
                if h is None:
                    raise LookupError(f"no handler for queue {job.queue}")
                out = _result(h(job))
                frames = _wire.message(b"REPLY", _wire.new_id(), out, job.msgid)
            except JobCancelled as e:
                frames = self._fail(job, f"cancelled: {e}")
            except BaseException as e:  # noqa: B902 - a handler's every failure is a FAIL
                frames = self._fail(job, f"{type(e).__name__}: {e}")
        except JobCancelled:  # the interrupt landed after the handler returned
            frames = frames or self._fail(job, "cancelled")
        while True:
            try:
                with job._lock:
                    job._running = False
                    job._ended = True
                if self.interrupt_on_cancel:
                    _async_raise(job._thread, None)  # one scheduled and not yet raised is dropped
                break
            except JobCancelled:
                continue
        self._results.append((job, frames))
        if not self._wake_pending:
            self._wake_pending = True
            self._waker.wake()

    @staticmethod
    def _fail(job: Job, reason: str) -> List[bytes]:
        if job.cancelled.is_set() and not reason.startswith("cancelled"):
            reason = "cancelled: " + reason
        if len(reason) > 4096:
            reason = reason[:4096] + "…"
        return _wire.message(b"FAIL", _wire.new_id(), job.msgid, reason)

    def _cancel(self, job: Job) -> None:
        job.cancelled.set()
        if self.interrupt_on_cancel:
            with job._lock:
                if job._running:
                    _async_raise(job._thread, JobCancelled)

    def _progress(self, job: Job, text: str) -> None:
        with self._report_lock:
            if job._ended:
                return
            now = time.monotonic()
            if now >= job._next_progress and job not in self._waiting_reports:
                job._next_progress = now + _PROGRESS_GAP
                self._reports.append((job, text))
            else:
                job._pending = text
                self._waiting_reports.add(job)
        self._waker.wake()

    def _due_reports(self, now: float) -> float:
        """Moves the reports whose turn has come to the queue; returns how
        long until the next one's turn (or a large number)."""
        nxt = 3600.0
        with self._report_lock:
            for job in list(self._waiting_reports):
                if job._ended:
                    self._waiting_reports.discard(job)
                elif now >= job._next_progress:
                    self._waiting_reports.discard(job)
                    job._next_progress = now + _PROGRESS_GAP
                    self._reports.append((job, job._pending or ""))
                    job._pending = None
                else:
                    nxt = min(nxt, job._next_progress - now)
        return nxt

    # -- the connection -----------------------------------------------------

    def _dealer(self) -> Dealer:
        return Dealer(self._ctx, self.endpoints, self.identity.encode(), *self._hb)

    def _serve(self) -> None:
        ivl, silence = self._hb
        d = self._dealer()
        poller = zmq.Poller()
        poller.register(self._waker.r, zmq.POLLIN)

        def watch(dl: Dealer) -> None:
            poller.register(dl.sock, zmq.POLLIN)
            poller.register(dl.monitor, zmq.POLLIN)

        def unwatch(dl: Dealer) -> None:
            poller.unregister(dl.sock)
            poller.unregister(dl.monitor)

        watch(d)
        running: Dict[str, Job] = {}
        unsent: List[List[bytes]] = []
        inform = _wire.encode_queues(self.queues())
        stopping = False
        grace_end = give_up = 0.0
        last_heard = last_beat = time.monotonic()
        ready = _wire.message(b"READY", "")  # the msgid frame is set per READY

        def send_ready(n: int) -> None:
            for _ in range(n):
                ready[3] = _wire.new_id().encode()
                d.send(ready)

        def greeted() -> None:
            nonlocal last_heard
            last_heard = time.monotonic()
            d.send(_wire.message(b"INFORM", _wire.new_id(), inform, b"worker"))
            while unsent and d.send(unsent[0]):
                unsent.pop(0)
            if not stopping:
                send_ready(self.slots - len(running))
            self.connected.set()
            log.info("emq worker: connected to %s, queues %s, %d slots", ",".join(sorted(d.greeted)),
                     ",".join(n for _, n in self.queues()), self.slots)

        while True:
            now = time.monotonic()
            timeout = min(ivl / 4, self._due_reports(now))
            if stopping:
                if not running:
                    break
                timeout = min(timeout, max(0.0, (give_up or grace_end) - now))
            events = dict(poller.poll(max(0.0, timeout) * 1000))
            now = time.monotonic()
            if self._waker.r in events:
                self._wake_pending = False
                self._waker.drain()
            if d.monitor in events:
                changed = d.events()
                if changed:
                    greeted()
                elif changed is False and not d.connected:
                    self.connected.clear()
                    log.warning("emq worker: connection to the broker lost; redialling")
            if d.sock in events:
                renew = False
                while True:
                    try:
                        f = d.sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    last_heard = now
                    cmd = f[2] if len(f) > 2 else b""
                    if cmd == _REQUEST and len(f) == 7 and f[0] == b"" and f[1] == _wire.VERSION:
                        if stopping:
                            continue  # not taken: the broker requeues it after our DISCONNECT
                        msgid = f[3].decode(errors="replace")
                        if msgid in running:
                            continue  # a resent REQUEST of a job running here
                        if len(running) >= self.slots:
                            d.send(_wire.message(b"FAIL", _wire.new_id(), msgid, "worker has no free slot"))
                            continue
                        job = Job(msgid, f[4].decode(errors="replace"), f[5], f[6], self)
                        running[msgid] = job
                        self._jobs.put(job)
                    elif cmd == _CANCEL and len(f) == 5:
                        job = running.get(f[4].decode(errors="replace"))
                        if job is not None:
                            log.info("emq worker: the broker cancelled job %s", job.msgid)
                            self._cancel(job)
                    elif cmd in (_KBYE, _DISCONNECT):
                        renew = True
                    elif cmd == _ERROR and len(f) == 7:
                        log.warning("emq worker: the broker refused a message: %s: %s",
                                    f[5].decode(errors="replace"), f[6].decode(errors="replace"))
                if renew:  # the broker is going: dial again (a takeover, a restart)
                    log.info("emq worker: the broker said goodbye; redialling")
                    unwatch(d)
                    d.close(0)
                    d = self._dealer()
                    watch(d)
                    self.connected.clear()
            if self._results:
                while self._results:
                    job, frames = self._results.popleft()
                    if running.pop(job.msgid, None) is None:
                        continue  # given up on at stop
                    if not d.send(frames):
                        unsent.append(frames)
                    elif not stopping:
                        send_ready(1)
            while self._reports:
                job, text = self._reports.popleft()
                if running.get(job.msgid) is job and not job._ended:
                    d.send(_wire.message(b"PROGRESS", _wire.new_id(), job.msgid, text))
            if self._stop_asked and not stopping:
                stopping = True
                grace_end = now + self.grace
                log.info("emq worker: stopping; no more jobs taken, %d running", len(running))
            if stopping and running and now >= grace_end and not give_up:
                log.warning("emq worker: grace period over; cancelling %d running jobs", len(running))
                for job in running.values():
                    self._cancel(job)
                give_up = now + 5.0
            if stopping and give_up and now >= give_up:
                log.error("emq worker: %d jobs did not return after cancel; leaving them to the broker", len(running))
                break
            if d.connected:
                if now - last_heard > silence:
                    log.warning("emq worker: the broker is silent for %.1f s; redialling", now - last_heard)
                    unwatch(d)
                    d.close(0)
                    d = self._dealer()
                    watch(d)
                    self.connected.clear()
                    last_heard = now
                elif now - last_beat >= ivl * 7 / 8:
                    last_beat = now
                    d.send(_wire.message(b"HEARTBEAT", _wire.new_id(), str(int(time.time()))))
        # Graceful end: answers that waited, then goodbye.
        deadline = time.monotonic() + 2.0
        while unsent and time.monotonic() < deadline:
            if d.send(unsent[0]):
                unsent.pop(0)
            elif d.monitor.poll(20):
                d.events()
        d.send(_wire.message(b"DISCONNECT", _wire.new_id()))
        unwatch(d)
        d.close(linger=2.0)
        log.info("emq worker: stopped")
