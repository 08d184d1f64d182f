"""What the libzmq interop scripts share: the protocol's version frame, one
zmq context closed before the interpreter's teardown, a receive that skips
HEARTBEATs with a deadline, and fresh msgids."""
import atexit
import sys
import time
import uuid

import zmq

V = b"eMQP/1.0"
ctx = zmq.Context()
# Close every socket, then the context, before the interpreter's teardown:
# a context the garbage collector ends before its sockets hangs (pyzmq #1167).
atexit.register(lambda: ctx.destroy(linger=2000))


def recv(sock, timeout_ms=10000):
    """The next message that is not a HEARTBEAT; exits when none comes in time."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0 or not sock.poll(left):
            sys.exit("timed out waiting for the broker")
        frames = sock.recv_multipart()
        assert frames[0] == b"" and frames[1] == V, frames
        if frames[2] == b"HEARTBEAT":
            continue
        return frames


def msgid():
    return str(uuid.uuid4()).encode()
