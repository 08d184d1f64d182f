"""EventMQ's pub/sub against an EMQ broker, with libzmq (python3-zmq) peers.

Usage: interop_pubsub.py FRONTEND PUBLISHER_INCOMING PUBLISHER_OUTGOING.
Publishers send what EventMQ's client send_publish_request sends (through
its send_emqp_message: '', eMQP/1.0, PUBLISH, msgid, topic, the message as
JSON) from a DEALER, to the frontend and to EventMQ's emq-pubsub address.
Subscribers are plain pyzmq SUB sockets, as eventmq/subscriber.py makes
them. Prints "ok" when every step passed.
"""
import atexit
import json
import random
import string
import sys
import time

import zmq

V = b"eMQP/1.0"
frontend, incoming, outgoing = sys.argv[1], sys.argv[2], sys.argv[3]
ctx = zmq.Context()
# Close every socket, then the context, before the interpreter's teardown:
# a context the garbage collector ends before its sockets hangs (pyzmq #1167).
atexit.register(lambda: ctx.destroy(linger=2000))


def msgid():
    # EventMQ's generate_msgid: random characters, not a UUID.
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(16)).encode()


def send_publish_request(sock, topic, message):
    sock.send_multipart([b"", V, b"PUBLISH", msgid(), topic.encode(), json.dumps(message).encode()])


def sub(*prefixes):
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.RCVTIMEO, 200)
    s.connect(outgoing)
    for p in prefixes:
        s.setsockopt(zmq.SUBSCRIBE, p.encode())
    return s


def recv(s, timeout=10.0):
    """The next published message that is not a probe (see settle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            f = s.recv_multipart()
        except zmq.Again:
            continue
        if f[1] != b'"probe"':
            return f
    sys.exit("timed out waiting for a published message")


def settle(pub, subs, topic, others=()):
    """Publish probes until every subscriber in subs has one: subscriptions
    travel asynchronously, as in any ZeroMQ pub/sub."""
    deadline = time.monotonic() + 10
    waiting = list(subs)
    while waiting and time.monotonic() < deadline:
        send_publish_request(pub, topic, "probe")
        for s in list(waiting):
            try:
                while True:
                    f = s.recv_multipart(zmq.NOBLOCK)
                    if json.loads(f[1]) == "probe":
                        waiting.remove(s)
                        break
            except zmq.Again:
                pass
        time.sleep(0.02)
    if waiting:
        sys.exit("subscriptions never took effect")
    # Later probes may still be on their way, to these and to others that
    # match: read away what has come (recv skips the rest).
    for s in list(subs) + list(others):
        try:
            while True:
                s.recv_multipart()
        except zmq.Again:
            pass


front = ctx.socket(zmq.DEALER)
front.connect(frontend)
pubsub = ctx.socket(zmq.DEALER)
pubsub.connect(incoming)

orders = sub("orders.", "users")  # several subscriptions on one socket
everything = sub("")
cancelled = sub("x", "probe")
settle(front, [orders, everything], "orders.probe")
settle(front, [cancelled], "probe", others=[everything])

send_publish_request(front, "orders.eu", {"id": 1})
send_publish_request(front, "users.new", {"id": 2})
send_publish_request(front, "other", {"id": 3})
for want in [[b"orders.eu", b'{"id": 1}'], [b"users.new", b'{"id": 2}']]:
    got = recv(orders)
    assert got == want, (got, want)
for n in (1, 2, 3):
    got = recv(everything)
    assert json.loads(got[1]) == {"id": n}, got

# EventMQ's emq-pubsub address, the same frames.
send_publish_request(pubsub, "orders.us", {"id": 4})
got = recv(orders)
assert got == [b"orders.us", b'{"id": 4}'], got
assert json.loads(recv(everything)[1]) == {"id": 4}

# Unsubscribe "x": an "x" message published before a "probe" marker never
# arrives once the cancel has landed.
cancelled.setsockopt(zmq.UNSUBSCRIBE, b"x")
deadline = time.monotonic() + 10
while True:
    send_publish_request(front, "x1", "x")
    send_publish_request(front, "probe", "marker")
    first = recv(cancelled)
    if first[0] == b"probe":
        break
    recv(cancelled)  # the marker
    if time.monotonic() > deadline:
        sys.exit("UNSUBSCRIBE did not take effect")

# Nothing from PUBLISH comes back to the publisher: no ACK, no ERROR.
front.setsockopt(zmq.RCVTIMEO, 200)
try:
    got = front.recv_multipart()
    assert got[2] == b"HEARTBEAT", got
except zmq.Again:
    pass

print("ok")
