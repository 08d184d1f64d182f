"""A libzmq peer (python3-zmq) as client, worker and EventMQ-style scheduler
against an EMQ broker.

Usage: interop.py FRONTEND BACKEND. Exits 0 and prints "ok" when every step
passed. The worker enables ZMTP heartbeats (PING every 100 ms, 300 ms
timeout): if the broker did not answer PING with PONG, libzmq would drop the
connection, which the socket monitor reports.
"""
import atexit
import sys
import time
import uuid

import zmq
from zmq.utils.monitor import recv_monitor_message

V = b"eMQP/1.0"
frontend, backend = sys.argv[1], sys.argv[2]
ctx = zmq.Context()
# Close every socket, then the context, before the interpreter's teardown:
# a context the garbage collector ends before its sockets hangs (pyzmq #1167).
atexit.register(lambda: ctx.destroy(linger=2000))


def recv(sock, skip_heartbeats=True, timeout_ms=10000):
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0 or not sock.poll(left):
            sys.exit("timed out waiting for the broker")
        frames = sock.recv_multipart()
        assert frames[0] == b"" and frames[1] == V, frames
        # Python 3 EventMQ decodes every frame as UTF-8.
        [f.decode("utf-8") for f in frames]
        if skip_heartbeats and frames[2] == b"HEARTBEAT":
            continue
        return frames


def msgid():
    return str(uuid.uuid4()).encode()


def inform(sock, queues, peer_type):
    """INFORM, then the ACK and at once the first HEARTBEAT, with the time."""
    id = msgid()
    sock.send_multipart([b"", V, b"INFORM", id, queues, peer_type])
    ack = recv(sock)
    assert ack[2] == b"ACK" and ack[4] == id, ack
    beat = recv(sock, skip_heartbeats=False)
    assert beat[2] == b"HEARTBEAT" and len(beat) == 5 and beat[4].isdigit(), beat


worker = ctx.socket(zmq.DEALER)
worker.setsockopt(zmq.IDENTITY, b"py-worker")
worker.setsockopt(zmq.HEARTBEAT_IVL, 100)
worker.setsockopt(zmq.HEARTBEAT_TIMEOUT, 300)
monitor = worker.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)
worker.connect(backend)
client = ctx.socket(zmq.DEALER)
client.connect(frontend)

inform(worker, b"interop", b"worker")
worker.send_multipart([b"", V, b"READY", msgid()])

for n, reply_form in enumerate(["seed (5 frames)", "6 frames"]):
    job = msgid()
    client.send_multipart([b"", V, b"REQUEST", job, b"interop", b"reply-requested", b'["run", {"path": "p", "callable": "c"}]'])
    ack = recv(client)
    assert ack[2] == b"ACK" and ack[4] == job, ack
    req = recv(worker)
    assert req[2] == b"REQUEST" and req[3] == job and req[4] == b"interop", req
    assert b"reply-requested" in req[5], req
    if n == 0:
        worker.send_multipart([b"", V, b"REPLY", job, b"result-%d" % n])
    else:
        worker.send_multipart([b"", V, b"REPLY", msgid(), b"result-%d" % n, job])
    worker.send_multipart([b"", V, b"READY", msgid()])
    rep = recv(client)
    assert rep[2] == b"REPLY" and rep[4] == b"result-%d" % n and rep[5] == job, (reply_form, rep)

# The same REQUEST twice, back to back, as a client resending at once: one
# answer for each, one job (a second delivery would fail the scheduler's
# step below, which expects the worker's next job).
job = msgid()
twice = [b"", V, b"REQUEST", job, b"interop", b"", b"twice"]
client.send_multipart(twice)
client.send_multipart(twice)
for _ in range(2):
    ack = recv(client)
    assert ack[2] == b"ACK" and ack[4] == job, ack
req = recv(worker)
assert req[2] == b"REQUEST" and req[3] == job, req
worker.send_multipart([b"", V, b"REPLY", msgid(), b"", job])
worker.send_multipart([b"", V, b"READY", msgid()])

# Stay quiet through several ZMTP heartbeat timeouts (the broker's own
# HEARTBEAT comes only once a second): only PONGs keep the connection.
if monitor.poll(1200):
    sys.exit("libzmq dropped the connection: %r" % recv_monitor_message(monitor))

# EventMQ's scheduler: it INFORMs with no queues and type scheduler, is
# passed the clients' SCHEDULE and UNSCHEDULE, and sends a REQUEST when a
# schedule is due.
sched = ctx.socket(zmq.DEALER)
sched.setsockopt(zmq.IDENTITY, b"py-scheduler")
sched.connect(frontend)
inform(sched, b"", b"scheduler")
run = b'["run", {"path": "app.tasks", "callable": "tick", "args": [], "kwargs": {}}]'
for cmd in [b"SCHEDULE", b"UNSCHEDULE"]:
    sid = msgid()
    client.send_multipart([b"", V, cmd, sid, b"interop", b"guarantee", b"-1", run, b"*/5 * * * *"])
    got = recv(sched)
    assert got[2:] == [cmd, sid, b"interop", b"guarantee", b"-1", run, b"*/5 * * * *"], got
    if cmd == b"SCHEDULE":  # the schedule is due: the scheduler sends the job
        job = msgid()
        sched.send_multipart([b"", V, b"REQUEST", job, b"interop", b"guarantee", run])
        ack = recv(sched)
        assert ack[2] == b"ACK" and ack[4] == job, ack
        req = recv(worker)
        assert req[2] == b"REQUEST" and req[3] == job and req[6] == run, req
        worker.send_multipart([b"", V, b"REPLY", msgid(), b"done", job])
        worker.send_multipart([b"", V, b"READY", msgid()])
sched.send_multipart([b"", V, b"KBYE", msgid()])

worker.send_multipart([b"", V, b"KBYE", msgid()])
print("ok")
