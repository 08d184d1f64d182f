"""One DEALER connected to a broker's endpoints, for the one thread that
owns it (a zmq socket is not thread-safe), with what that thread needs to
know: which endpoints have greeted (a completed ZMTP handshake), and a
pipe that other threads write to wake it.

Every endpoint is connected at once. Only a serving broker listens on a
group's eMQP ports (a standby binds them when it takes over), so the
socket holds a connection to the one that serves; with ZMQ_IMMEDIATE a
message goes only to a connection whose handshake is done, never to a
queue that waits for a broker that may never come. libzmq redials a lost
or refused endpoint by itself (50 ms, doubling to 500 ms), and sends ZMTP
PINGs: a broker silent for the heartbeat timeout (paused, or a network
that drops everything) has its connection dropped, and the socket goes on
with whichever endpoint greets next.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Set

import zmq
from zmq.utils.monitor import recv_monitor_message

_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED


def endpoint_list(endpoints: "str | Sequence[str]") -> List[str]:
    """Endpoints given as a list or comma-separated; at least one."""
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    out = [e.strip() for e in endpoints if e.strip()]
    if not out:
        raise ValueError("no broker endpoint given (tcp://host:port)")
    for e in out:
        if "://" not in e:
            raise ValueError(f"endpoint {e!r} is not a ZeroMQ address (tcp://host:port)")
    return out


class Waker:
    """A pipe other threads write a byte to, to wake a poll."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)

    def wake(self) -> None:
        try:
            os.write(self.w, b"x")
        except (BlockingIOError, OSError):
            pass  # full: a wake is pending already (or closed at exit)

    def drain(self) -> None:
        try:
            while os.read(self.r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


class Dealer:
    """A DEALER to endpoints with a routing id kept across reconnects."""

    def __init__(self, ctx: zmq.Context, endpoints: List[str], identity: bytes,
                 heartbeat_ivl: float, heartbeat_timeout: float, linger: float = 0.0) -> None:
        self.endpoints = endpoints
        self.sock: zmq.Socket = ctx.socket(zmq.DEALER)
        s = self.sock
        s.setsockopt(zmq.ROUTING_ID, identity)
        s.setsockopt(zmq.IMMEDIATE, 1)
        s.setsockopt(zmq.LINGER, int(linger * 1000))
        s.setsockopt(zmq.RECONNECT_IVL, 50)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        s.setsockopt(zmq.HEARTBEAT_IVL, int(heartbeat_ivl * 1000))
        s.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(heartbeat_timeout * 1000))
        s.setsockopt(zmq.SNDHWM, 100_000)
        s.setsockopt(zmq.RCVHWM, 100_000)
        self.monitor: zmq.Socket = s.get_monitor_socket(_EVENTS)
        self.greeted: Set[str] = set()  # endpoints whose handshake is done
        for e in endpoints:
            s.connect(e)

    @property
    def connected(self) -> bool:
        return bool(self.greeted)

    def events(self) -> Optional[bool]:
        """Reads the monitor's events: True if an endpoint greeted among
        them, False if one was lost, None if neither changed."""
        changed: Optional[bool] = None
        while True:
            try:
                ev = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return changed
            ep = ev.get("endpoint", b"")
            ep = ep.decode() if isinstance(ep, bytes) else str(ep)
            if ev["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.greeted.add(ep)
                changed = True
            elif ev["event"] == zmq.EVENT_DISCONNECTED and ep in self.greeted:
                self.greeted.discard(ep)
                if changed is None:
                    changed = False

    def send(self, frames: List[bytes]) -> bool:
        """Sends without waiting; False when no broker has greeted (or
        libzmq's queue is full): the caller sends it again later."""
        try:
            # copy=True: with copy=False pyzmq still copies a frame under
            # zmq.COPY_THRESHOLD (64 KiB), having wrapped it in a zmq.Frame
            # first, which costs more than the copy of eMQP's small frames.
            self.sock.send_multipart(frames, zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def close(self, linger: Optional[float] = None) -> None:
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(0)
        self.sock.close(None if linger is None else int(linger * 1000))
