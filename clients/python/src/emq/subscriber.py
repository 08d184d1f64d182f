"""The Subscriber: what is published (Client.publish, PUBLISH) to topic
prefixes it subscribes to, from the broker's publisher-outgoing endpoint
(tcp://127.0.0.1:47299 by default). A ZeroMQ SUB socket: it reconnects by
itself and subscribes again. Pub/sub is not durable: what is published
while it is not connected, or past its queue at the broker, it does not
get."""

from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Sequence, Union

import zmq

from ._transport import endpoint_list
from .errors import ClosedError


class Message(NamedTuple):
    """A published message as a subscriber receives it."""

    topic: bytes
    payload: bytes


class Subscriber:
    """Receives published messages. Use it from one thread.

    endpoints: the broker's publisher-outgoing; several for a group (the
    serving broker is the one that answers). prefixes: topic prefixes to
    subscribe to; "" is every topic.
    """

    def __init__(self, endpoints: Union[str, Sequence[str]], *prefixes: Union[str, bytes],
                 context: Optional[zmq.Context] = None, heartbeat_interval: float = 1.0,
                 heartbeat_timeout: float = 3.0) -> None:
        self.endpoints = endpoint_list(endpoints)
        ctx = context or zmq.Context.instance()
        self._sock: zmq.Socket = ctx.socket(zmq.SUB)
        s = self._sock
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RECONNECT_IVL, 50)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        s.setsockopt(zmq.HEARTBEAT_IVL, int(heartbeat_interval * 1000))
        s.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(heartbeat_timeout * 1000))
        for p in prefixes:
            self.subscribe(p)
        for e in self.endpoints:
            s.connect(e)
        self._closed = False

    def subscribe(self, prefix: Union[str, bytes]) -> None:
        """Adds a topic prefix ("" for every topic)."""
        self._sock.setsockopt(zmq.SUBSCRIBE, prefix.encode() if isinstance(prefix, str) else prefix)

    def unsubscribe(self, prefix: Union[str, bytes]) -> None:
        """Removes a topic prefix subscribed to before."""
        self._sock.setsockopt(zmq.UNSUBSCRIBE, prefix.encode() if isinstance(prefix, str) else prefix)

    def recv(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message; None if none came within timeout seconds
        (None: wait until one comes)."""
        if self._closed:
            raise ClosedError("the subscriber is closed")
        if not self._sock.poll(None if timeout is None else int(timeout * 1000)):
            return None
        frames = self._sock.recv_multipart()
        if len(frames) != 2:
            return self.recv(0)  # not what the broker sends: skipped
        return Message(frames[0], frames[1])

    def __iter__(self) -> Iterator[Message]:
        while True:
            m = self.recv()
            if m is not None:
                yield m

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._sock.close(0)

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
