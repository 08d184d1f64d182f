"""The Client: sends jobs to an EMQ broker and waits for their ACK (or
REPLY). See the package's README for the picture; in short:

- One background thread owns the connection (a DEALER to every endpoint
  given: the one that serves greets). Calls from any thread hand it their
  message and wait on an event; except a call that waits only for an ACK
  and is alone (no other call in flight): its thread borrows the socket,
  sends and reads the ACK itself, and gives the call back to the
  background thread (resends, failover) if the ACK is slow to come or
  the background thread has work.
- The client trusts only ACKs. A message not ACKed within resend_after,
  or not sent because no broker had greeted yet, or in flight when a new
  broker greets (a restart, a failover to a group's standby), is sent
  again with the same msgid: the broker stores a msgid once, so a resend
  never makes a second job. ERROR unavailable (the broker is stopping, or
  a group has no majority) is retried the same way.
- A queue served by another shard (ERROR moved) is followed: the job goes,
  with its msgid, to the endpoints the broker names.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import threading
import time
from typing import Any, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import zmq

from . import _wire
from ._transport import Dealer, Waker, endpoint_list
from .errors import BrokerError, ClosedError, MovedError, NotFoundError, Timeout, broker_error, bulk_error

log = logging.getLogger("emq")

Payload = Union[bytes, str]

_ACK, _REPLY, _ERROR, _ROUTES = b"ACK", b"REPLY", b"ERROR", b"ROUTES"
_ZMQ_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


def _bytes(p: Payload) -> bytes:
    if isinstance(p, str):
        return p.encode()
    if isinstance(p, (bytes, bytearray, memoryview)):
        return bytes(p)
    raise TypeError(f"a payload is bytes or str, not {type(p).__name__}")


def _check_queue(queue: str) -> None:
    if not isinstance(queue, str) or not queue or len(queue.encode()) > _wire.MAX_QUEUE_LEN:
        raise ValueError(f"queue name {queue!r} must be 1 to {_wire.MAX_QUEUE_LEN} bytes of UTF-8")


def _check_msgid(msgid: str) -> None:
    if not msgid or len(msgid.encode()) > _wire.MAX_ID_LEN:
        raise ValueError(f"msgid {msgid!r} must be 1 to {_wire.MAX_ID_LEN} bytes")


def _secs(v: float) -> str:
    """Seconds as a header value: whole seconds, rounded up (the broker's
    timeout takes decimals, delay does not)."""
    if v < 0:
        raise ValueError(f"a duration must not be negative, not {v}")
    n = int(v)
    return str(n if n == v else n + 1)


def job_headers(headers: Optional[_wire.Headers] = None, *, priority: Optional[int] = None,
                unique: Optional[str] = None, unique_for: Optional[float] = None,
                tenant: Optional[str] = None, delay: Optional[float] = None,
                job_timeout: Optional[float] = None, retry_count: Optional[int] = None,
                after: Optional[Sequence[str]] = None, after_batch: Optional[str] = None,
                after_failed: Optional[str] = None, batch: Optional[str] = None,
                batch_open: bool = False, limit: Optional[Sequence[str]] = None) -> Dict[str, _wire.HeaderValue]:
    """A job's headers from the keywords of send (docs/protocol.md, Headers):
    headers first, each keyword over it."""
    h: Dict[str, _wire.HeaderValue] = dict(headers or {})
    if priority is not None:
        if not 0 <= priority <= 65535:
            raise ValueError(f"priority must be 0 to 65535, not {priority}")
        h["priority"] = priority
    if unique is not None:
        h["unique"] = unique
        if unique_for:
            h["unique-for"] = _secs(unique_for)
    if tenant is not None:
        h["tenant"] = tenant
    if delay is not None:
        h["delay"] = _secs(delay)
    if job_timeout is not None:
        h["timeout"] = _secs(job_timeout)
    if retry_count is not None:
        h["retry-count"] = retry_count
    if after:
        h["after"] = ";".join(after)
    if after_batch is not None:
        h["after-batch"] = after_batch
    if after_failed is not None:
        h["after-failed"] = after_failed
    if batch is not None:
        h["batch"] = batch
        if batch_open:
            h["batch-open"] = True
    if limit:
        h["limit"] = ";".join(limit)
    return h


@dataclasses.dataclass
class BulkJob:
    """One job of Client.bulk: its payload, and optionally its own queue
    (else bulk's), msgid (else a new one) and headers (job_headers makes
    them from send's keywords)."""

    payload: Payload
    queue: Optional[str] = None
    msgid: Optional[str] = None
    headers: Optional[_wire.Headers] = None


class _Latch:
    """A one-shot event for one waiter: a bare lock, which wakes its waiter
    sooner than threading.Event's condition (a send's ACK is one wake)."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            try:
                self._lock.release()
            except RuntimeError:
                pass  # set twice at once (close racing an answer)

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: Optional[float]) -> bool:
        if self._set:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            self._lock.release()
            return True
        return self._set


class _Call:
    __slots__ = ("msgid", "frames", "want_reply", "done", "acked", "reply", "error", "last_error",
                 "sent_at", "bulk")

    def __init__(self, msgid: str, frames: List[bytes], want_reply: bool, bulk: bool = False) -> None:
        self.msgid = msgid
        self.frames = frames
        self.want_reply = want_reply
        self.bulk = bulk
        self.done = _Latch()
        self.acked = False
        self.reply: Optional[bytes] = None
        self.error: Optional[BaseException] = None
        self.last_error: Optional[BrokerError] = None
        self.sent_at = 0.0  # 0: to send (again) as soon as a broker greets


class _Link:
    """One connection (a DEALER to a set of endpoints) and the thread that
    owns it.

    Whoever holds _sock_lock may use the socket: the thread, or a caller
    on the fast path. Each holder reads the socket until it is empty
    (_read) as its last use of it before letting go, so that the socket's
    file descriptor, which signals only news, signals the next message.
    """

    def __init__(self, ctx: zmq.Context, endpoints: List[str], identity: bytes, resend_after: float,
                 heartbeat_interval: float, heartbeat_timeout: float) -> None:
        self.endpoints = endpoints
        self._ctx = ctx
        self._identity = identity
        self._resend_after = resend_after
        self._hb = (heartbeat_interval, heartbeat_timeout)
        self._lock = threading.Lock()
        self._calls: Dict[str, _Call] = {}
        self._outq: Deque[_Call] = collections.deque()
        self._pubs: Deque[List[bytes]] = collections.deque()
        self._waker = Waker()
        self._sock_lock = threading.Lock()
        self._dealer: Optional[Dealer] = None  # set and cleared by the thread, holding _sock_lock
        self._fast: Optional[_Call] = None  # the call whose caller waits on the socket itself
        self._closed = False
        self._stop = False
        self._linger = 0.0
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="emq-client " + ",".join(endpoints), daemon=True)
        self._thread.start()

    # -- called from any thread -------------------------------------------

    def call(self, call: _Call, timeout: Optional[float]) -> _Call:
        deadline = None if timeout is None else time.monotonic() + timeout
        # The fast path: a caller alone (no other call, nothing queued for
        # the thread) sends and reads the socket itself, sparing the two
        # wakes of a hand-off to the thread and back. Not for a REPLY,
        # which may be long in coming.
        held = not call.want_reply and self._sock_lock.acquire(blocking=False)
        try:
            with self._lock:
                if self._closed:
                    raise ClosedError("the client is closed")
                if call.msgid in self._calls:
                    raise ValueError(f"msgid {call.msgid} is already in flight")
                fast = held and not self._calls and not self._outq and not self._pubs and self._dealer is not None
                self._calls[call.msgid] = call
                if fast:
                    self._fast = call
        except BaseException:
            if held:
                self._sock_lock.release()
            raise
        try:
            if fast:
                self._wait_on_socket(call, deadline)  # lets go of _sock_lock
            else:
                if held:
                    self._sock_lock.release()
                self._outq.append(call)
                self._waker.wake()
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not call.done.wait(left):
                what = "REPLY" if call.acked else "ACK"
                where = ",".join(self.endpoints)
                text = f"no {what} for {call.msgid} from the broker at {where} within {timeout} s"
                if call.acked:
                    text += " (the job is stored, and runs)"
                elif call.last_error is not None:
                    text += f" (last answer: {call.last_error})"
                elif not self.connected.is_set():
                    text += " (no broker has answered there: is it running?)"
                raise Timeout(text, call.msgid, call.acked, call.last_error)
        finally:
            with self._lock:
                self._calls.pop(call.msgid, None)
        if call.error is not None:
            raise call.error
        return call

    def _wait_on_socket(self, call: _Call, deadline: Optional[float]) -> None:
        """The fast path, holding _sock_lock: sends call and reads the
        socket until its answer, handing every other message read to
        _read's dispatch. Gives the call to the thread (its resends,
        failover) when no broker has greeted, when it is not answered
        within resend_after, or when the thread wakes: it has work, and
        needs the socket."""
        d = self._dealer
        assert d is not None
        try:
            if d.send(call.frames):
                call.sent_at = time.monotonic()
                until = call.sent_at + self._resend_after
                if deadline is not None:
                    until = min(until, deadline)
                items = [(d.sock, zmq.POLLIN), (self._waker.r, zmq.POLLIN)]
                while True:
                    ms = (until - time.monotonic()) * 1000
                    ready = zmq.zmq_poll(items, int(ms) + 1) if ms > 0 else []
                    self._read(d)
                    if call.done.is_set() or not ready or any(s is not d.sock for s, _ in ready):
                        return  # answered, or the time is up, or the thread woke: it needs the socket
            else:
                self._read(d)
        finally:
            with self._lock:
                self._fast = None
            self._sock_lock.release()
            if not call.done.is_set():
                if call.sent_at == 0.0:
                    self._outq.append(call)
                self._waker.wake()

    def publish(self, frames: List[bytes]) -> None:
        if self._closed:
            raise ClosedError("the client is closed")
        self._pubs.append(frames)
        self._waker.wake()

    def close(self, linger: float) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            calls = list(self._calls.values())
        for c in calls:
            c.error = ClosedError("the client was closed while the call waited")
            c.done.set()
        self._linger = linger
        self._stop = True
        self._waker.wake()
        self._thread.join()
        self._waker.close()

    # -- the connection's thread -------------------------------------------

    def _take_socket(self) -> None:
        """Takes _sock_lock, waking a fast-path caller that holds it: it
        lets go at once (it polls the waker too)."""
        if not self._sock_lock.acquire(blocking=False):
            self._waker.wake()
            self._sock_lock.acquire()

    def _run(self) -> None:
        d = Dealer(self._ctx, self.endpoints, self._identity, *self._hb)
        fd = d.sock.getsockopt(zmq.FD)
        with self._sock_lock:
            self._dealer = d
        base = [(d.monitor, zmq.POLLIN), (self._waker.r, zmq.POLLIN)]
        with_fd = base + [(fd, zmq.POLLIN)]
        tick = min(self._resend_after / 4, 0.25)
        next_check = time.monotonic() + tick
        try:
            while True:
                # The socket's descriptor is watched while a call waits on
                # this thread; not while only a fast-path caller's does, so
                # that its answer wakes only that caller. What else comes
                # then (nothing is asked) is read at the next tick.
                with self._lock:
                    watch = len(self._calls) > (0 if self._fast is None else 1)
                wait = max(0.0, next_check - time.monotonic())
                ready = zmq.zmq_poll(with_fd if watch else base, int(wait * 1000) + 1)
                greeted = False
                for s, _ in ready:
                    if s is d.monitor and d.events() is not None:
                        if d.connected:
                            self.connected.set()
                            greeted = True  # a new broker: what is not ACKed goes again
                        else:
                            self.connected.clear()
                now = time.monotonic()
                due = now >= next_check
                if due:
                    next_check = now + tick
                woke = any(s == self._waker.r for s, _ in ready)
                if greeted or woke or self._stop:
                    self._take_socket()
                elif not (due or any(s == fd for s, _ in ready)) or not self._sock_lock.acquire(blocking=False):
                    continue  # nothing to do, or a fast-path caller reads the socket
                try:
                    self._waker.drain()
                    if greeted:
                        self._resend(d, everything=True)
                    while self._outq:
                        c = self._outq.popleft()
                        if not c.done.is_set() and c.sent_at == 0.0 and d.send(c.frames):
                            c.sent_at = now
                    while self._pubs and d.send(self._pubs[0]):
                        self._pubs.popleft()
                    if self._stop:
                        self._finish(d)
                        return
                    if due:
                        self._resend(d, everything=False)
                    self._read(d)
                finally:
                    self._sock_lock.release()
        finally:
            with self._sock_lock:
                self._dealer = None
                d.close(0)

    def _finish(self, d: Dealer) -> None:
        """Close: PUBLISHes queued go out, within the linger."""
        end = time.monotonic() + self._linger
        while self._pubs and time.monotonic() < end:
            if d.send(self._pubs[0]):
                self._pubs.popleft()
            elif d.monitor.poll(10):
                d.events()
        self._dealer = None
        d.close(max(0.0, end - time.monotonic()))

    def _resend(self, d: Dealer, everything: bool) -> None:
        now = time.monotonic()
        with self._lock:
            calls = [c for c in self._calls.values() if c is not self._fast]
        for c in calls:
            if c.acked or c.done.is_set():
                continue
            if everything or c.sent_at == 0.0 or now - c.sent_at >= self._resend_after:
                c.sent_at = now if d.send(c.frames) else 0.0

    def _read(self, d: Dealer) -> None:
        """Reads and dispatches every message the socket holds; by the one
        that holds _sock_lock. Asking ZMQ_EVENTS, as the last use of the
        socket, re-arms its descriptor (cheaper than a recv's zmq.Again)."""
        sock = d.sock
        calls = self._calls
        while sock.getsockopt(_ZMQ_EVENTS) & _POLLIN:
            try:
                f = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            cmd = f[2] if len(f) > 2 else b""
            if cmd == _ACK and len(f) == 5:  # the common answer, read without decode
                c = calls.get(f[4].decode())
                if c is not None and not c.acked:
                    c.acked = True
                    if not c.want_reply:
                        c.done.set()
                continue
            try:
                m = _wire.decode(f)
            except _wire.ProtocolError as e:
                log.warning("emq: undecodable message from the broker: %s", e)
                continue
            if m.command == "REPLY":
                c = calls.get(m.fields["orig_msgid"])  # type: ignore[arg-type]
                if c is not None and c.want_reply and not c.done.is_set():
                    c.acked, c.reply = True, m.fields["payload"]  # type: ignore[assignment]
                    c.done.set()
            elif m.command == "ROUTES":
                c = calls.get(m.msgid)
                if c is not None and c.want_reply:
                    c.acked, c.reply = True, str(m.fields["table"]).encode()
                    c.done.set()
            elif m.command == "ERROR":
                ref, code, text = str(m.fields["ref_msgid"]), str(m.fields["code"]), str(m.fields["text"])
                c = calls.get(ref)
                if c is None:
                    log.warning("emq: the broker refused a message: ref_msgid=%s %s: %s", ref, code, text)
                    continue
                err = bulk_error(code, text, ref) if c.bulk else broker_error(code, text, ref)
                if code == "unavailable":
                    c.last_error = err  # sent again after resend_after
                else:
                    c.error = err
                    c.done.set()
            # HEARTBEAT, KBYE: nothing to do; libzmq redials a broker that goes.


class Client:
    """Sends jobs to an EMQ broker; safe for use from many threads.

    endpoints: the broker's frontend, ``tcp://host:port``; several (a list
    or comma-separated) for a replicated group: the one that serves
    answers, and jobs not ACKed follow it with their msgids.

    timeout is how long a call waits by default (None: until answered).
    """

    def __init__(self, endpoints: Union[str, Sequence[str]], *, identity: Optional[str] = None,
                 timeout: Optional[float] = 30.0, resend_after: float = 5.0,
                 heartbeat_interval: float = 1.0, heartbeat_timeout: float = 3.0,
                 context: Optional[zmq.Context] = None) -> None:
        self.endpoints = endpoint_list(endpoints)
        if heartbeat_timeout <= heartbeat_interval:
            raise ValueError(f"heartbeat_timeout {heartbeat_timeout} must be longer than heartbeat_interval {heartbeat_interval}")
        if resend_after <= 0:
            raise ValueError(f"resend_after must be positive, not {resend_after}")
        self.identity = identity or _wire.new_id()
        self.timeout = timeout
        self._opts = (resend_after, heartbeat_interval, heartbeat_timeout)
        self._ctx = context or zmq.Context.instance()
        self._lock = threading.Lock()
        self._closed = False
        self._seed = self._new_link(self.endpoints)
        self._links: Dict[Tuple[str, ...], _Link] = {tuple(self.endpoints): self._seed}
        self._owner: Dict[str, _Link] = {}  # queue -> its shard's link, learnt from ERROR moved

    def _new_link(self, endpoints: List[str]) -> _Link:
        return _Link(self._ctx, endpoints, self.identity.encode(), *self._opts)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, linger: float = 1.0) -> None:
        """Stops resending; calls in progress raise ClosedError. PUBLISHes
        queued are written first, for up to linger seconds."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            links = list(self._links.values())
        for link in links:
            link.close(linger)

    # -- routing ----------------------------------------------------------

    def _link_for(self, queue: Optional[str]) -> _Link:
        with self._lock:
            if self._closed:
                raise ClosedError("the client is closed")
            return self._owner.get(queue or "", self._seed)

    def _link_to(self, endpoints: List[str]) -> _Link:
        key = tuple(endpoints)
        with self._lock:
            if self._closed:
                raise ClosedError("the client is closed")
            link = self._links.get(key)
            if link is None:
                link = self._links[key] = self._new_link(list(endpoints))
            return link

    def _do(self, queue: Optional[str], msgid: str, frames: List[bytes], want_reply: bool,
            timeout: Optional[float], bulk: bool = False) -> _Call:
        """Sends a message to queue's shard, following ERROR moved, and
        waits for its answer."""
        if timeout is None:
            timeout = self.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        link = self._link_for(queue)
        for hop in range(1, 9):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return link.call(_Call(msgid, frames, want_reply, bulk), left)
            except MovedError as e:
                if hop == 8 or not e.endpoints or queue is None:
                    raise
                nxt = self._link_to(e.endpoints)
                with self._lock:
                    self._owner[queue] = nxt
                if nxt is link:  # told to go where it went: the placement is changing
                    time.sleep(min(hop * 0.05, 0.5))
                link = nxt
        raise AssertionError("unreachable")

    # -- jobs ----------------------------------------------------------------

    def send(self, queue: str, payload: Payload = b"", *, headers: Optional[_wire.Headers] = None,
             priority: Optional[int] = None, unique: Optional[str] = None, unique_for: Optional[float] = None,
             tenant: Optional[str] = None, delay: Optional[float] = None, job_timeout: Optional[float] = None,
             retry_count: Optional[int] = None, after: Optional[Sequence[str]] = None,
             after_batch: Optional[str] = None, after_failed: Optional[str] = None,
             batch: Optional[str] = None, batch_open: bool = False, limit: Optional[Sequence[str]] = None,
             msgid: Optional[str] = None, timeout: Optional[float] = None) -> str:
        """Enqueues a job and returns its msgid once the broker has stored
        it (its ACK). The keywords set the job's headers (docs/protocol.md):
        delay, job_timeout and unique_for in seconds. msgid sends the job
        under an id of your own: the same msgid twice is one job.
        Raises a BrokerError subclass when the broker refuses the job
        (DuplicateError, QueueFullError, BadRequestError, ...), Timeout
        when no ACK came within timeout (the client's default if None)."""
        h = job_headers(headers, priority=priority, unique=unique, unique_for=unique_for, tenant=tenant,
                        delay=delay, job_timeout=job_timeout, retry_count=retry_count, after=after,
                        after_batch=after_batch, after_failed=after_failed, batch=batch,
                        batch_open=batch_open, limit=limit)
        return self._request(queue, payload, h, msgid, False, timeout)[0]

    def request(self, queue: str, payload: Payload = b"", *, headers: Optional[_wire.Headers] = None,
                timeout: Optional[float] = None, msgid: Optional[str] = None, **options: Any) -> bytes:
        """Enqueues a job and waits for its worker's REPLY, returned as
        bytes. Takes send's keywords. On Timeout, ``stored`` says whether
        the job had been ACKed (it then runs, and its REPLY is lost)."""
        h = job_headers(headers, **options)
        h["reply-requested"] = True
        reply = self._request(queue, payload, h, msgid, True, timeout)[1]
        return reply if reply is not None else b""

    def _request(self, queue: str, payload: Payload, headers: Mapping[str, _wire.HeaderValue],
                 msgid: Optional[str], want_reply: bool, timeout: Optional[float]) -> Tuple[str, Optional[bytes]]:
        _check_queue(queue)
        msgid = msgid or _wire.new_id()
        _check_msgid(msgid)
        frames = _wire.message(b"REQUEST", msgid, queue, _wire.encode_headers(headers), _bytes(payload))
        c = self._do(queue, msgid, frames, want_reply, timeout)
        return msgid, c.reply

    def bulk(self, queue: Optional[str], jobs: Iterable[Union[Payload, BulkJob]], *,
             timeout: Optional[float] = None) -> List[str]:
        """Sends jobs in one BULK and returns their msgids, in order, once
        the broker has stored them all in one commit. All or none: a
        refusal stores nothing and raises BulkError naming the first job
        refused (index, job_msgid, and the code its send would have got).
        Each job is a payload for queue, or a BulkJob. Sent again until
        ACKed, with the same msgids: the broker stores each once."""
        frames_jobs: List[bytes] = []
        ids: List[str] = []
        seen: Dict[str, int] = {}
        first_queue = None
        for i, j in enumerate(jobs):
            if not isinstance(j, BulkJob):
                j = BulkJob(payload=j)
            q = j.queue or queue
            if q is None:
                raise ValueError(f"job {i} has no queue, and bulk was given none")
            _check_queue(q)
            first_queue = first_queue or q
            jid = j.msgid or _wire.new_id()
            _check_msgid(jid)
            if jid in seen:
                raise ValueError(f"job {i}: msgid {jid} is job {seen[jid]}'s too")
            seen[jid] = i
            ids.append(jid)
            frames_jobs += [jid.encode(), q.encode(), _wire.encode_headers(j.headers), _bytes(j.payload)]
        if not ids:
            raise ValueError("a bulk needs at least one job")
        msgid = _wire.new_id()
        self._do(first_queue, msgid, _wire.message(b"BULK", msgid, *frames_jobs), False, timeout, bulk=True)
        return ids

    def cancel(self, msgid: str, *, timeout: Optional[float] = None) -> None:
        """Cancels the job msgid: taken out of its queue, or, if a worker
        runs it, the worker is told to stop (and its answer ignored).
        Raises NotFoundError (no such job) or ConflictError (done, dead or
        cancelled already)."""
        _check_msgid(msgid)
        with self._lock:
            links = [self._seed] + [lk for lk in self._links.values() if lk is not self._seed]
        err: Optional[BrokerError] = None
        for link in links:  # the job is on one shard; which is not known
            cid = _wire.new_id()
            try:
                link.call(_Call(cid, _wire.message(b"CANCEL", cid, msgid), False),
                          self.timeout if timeout is None else timeout)
                return
            except NotFoundError as e:
                err = e
        assert err is not None
        raise err

    def schedule(self, queue: str, payload: Payload = b"", *, every: Optional[float] = None,
                 cron: Optional[str] = None, schedule_id: Optional[str] = None, tz: Optional[str] = None,
                 nohaste: bool = False, run_count: Optional[int] = None, misfire: Optional[str] = None,
                 headers: Optional[_wire.Headers] = None, timeout: Optional[float] = None, **options: Any) -> None:
        """Asks the broker to keep a schedule (SCHEDULE): the job made
        every ``every`` seconds (whole, at least 1), or at the times of
        ``cron`` (5 fields or @hourly; in UTC unless tz names a zone),
        until unschedule. Returns once the broker has stored it. The same
        schedule again changes nothing; another with the same schedule_id
        replaces it. options are send's header keywords for its jobs."""
        if (every is None) == (cron is None):
            raise ValueError("a schedule needs every (seconds) or cron, and not both")
        interval = _wire.CRON_INTERVAL
        if every is not None:
            if every < 1:
                raise ValueError(f"every must be a second or more, not {every}")
            interval = int(_secs(every))
        h = job_headers(headers, **options)
        for k, v in (("schedule-id", schedule_id), ("tz", tz), ("run_count", run_count), ("misfire", misfire)):
            if v is not None:
                h[k] = v
        if nohaste:
            h["nohaste"] = True
        self._schedule(b"SCHEDULE", queue, payload, h, interval, cron or "", timeout)

    def unschedule(self, queue: str, payload: Payload = b"", *, schedule_id: Optional[str] = None,
                   headers: Optional[_wire.Headers] = None, timeout: Optional[float] = None) -> None:
        """Removes the schedule that queue, payload and schedule_id name (as
        schedule named it); removing one that is not there is no error."""
        h = dict(headers or {})
        if schedule_id is not None:
            h["schedule-id"] = schedule_id
        self._schedule(b"UNSCHEDULE", queue, payload, h, _wire.CRON_INTERVAL, "", timeout)

    def _schedule(self, cmd: bytes, queue: str, payload: Payload, h: Mapping[str, _wire.HeaderValue],
                  interval: int, cron: str, timeout: Optional[float]) -> None:
        _check_queue(queue)
        msgid = _wire.new_id()
        frames = _wire.message(cmd, msgid, queue, _wire.encode_headers(h), str(interval), _bytes(payload), cron)
        self._do(queue, msgid, frames, False, timeout)

    def publish(self, topic: Union[str, bytes], payload: Payload = b"") -> None:
        """PUBLISH: fire and forget, as in EventMQ. The broker passes
        [topic, payload] to the subscribers of topic's prefixes; nothing
        is stored or ACKed. Queued here and written once a broker has
        greeted; close writes what is queued."""
        t = _bytes(topic)
        if len(t) > _wire.MAX_TOPIC_LEN:
            raise ValueError(f"topic is {len(t)} bytes, over {_wire.MAX_TOPIC_LEN}")
        self._link_for(None).publish(_wire.message(b"PUBLISH", _wire.new_id(), t, _bytes(payload)))

    def routes(self, *, timeout: float = 2.0) -> Dict[str, Any]:
        """Where queues are served when they are spread over shards
        (ROUTES): version, shards, hashed, queues, moving; {} from a
        broker that is not a shard."""
        msgid = _wire.new_id()
        c = self._link_for(None).call(_Call(msgid, _wire.message(b"ROUTES", msgid), True), timeout)
        table = json.loads(c.reply or b"{}")
        return table if isinstance(table, dict) else {}

    def wait_connected(self, timeout: Optional[float] = None) -> bool:
        """Waits until a broker has greeted; False if none did in time."""
        return self._seed.connected.wait(timeout)

