"""A libzmq peer (python3-zmq) sending EventMQ's client SCHEDULE and
UNSCHEDULE frames to an EMQ broker that keeps schedules itself.

Usage: interop_schedules.py FRONTEND BACKEND ADMIN. Exits 0 and prints "ok"
when every step passed. The frames are built as eventmq.client.messages
schedule() builds them: queue, the headers joined by commas, str(interval
or -1), json.dumps(["run", {...}]), the cron expression or "".
"""
import atexit
import hashlib
import json
import sys
import time
import urllib.request
import uuid

import zmq

V = b"eMQP/1.0"
frontend, backend, admin = sys.argv[1], sys.argv[2], sys.argv[3]
ctx = zmq.Context()
# Close every socket, then the context, before the interpreter's teardown:
# a context the garbage collector ends before its sockets hangs (pyzmq #1167).
atexit.register(lambda: ctx.destroy(linger=2000))


def recv(sock, timeout_s=10.0):
    """The next message but HEARTBEATs, or None when timeout_s passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0 or not sock.poll(left):
            return None
        frames = sock.recv_multipart()
        assert frames[0] == b"" and frames[1] == V, frames
        if frames[2] != b"HEARTBEAT":
            return frames


def must_recv(sock):
    frames = recv(sock)
    if frames is None:
        sys.exit("timed out waiting for the broker")
    return frames


def msgid():
    return str(uuid.uuid4()).encode()


def schedule(sock, func_path, interval_secs=None, cron=None, unschedule=False, headers=("guarantee",), queue="ticks",
             args=(), kwargs=None):
    """SCHEDULE or UNSCHEDULE as EventMQ's client sends it; returns the
    msgid and the payload."""
    path, callable_name = func_path.rsplit(".", 1)
    msg = ["run", {"callable": callable_name, "path": path, "args": args, "kwargs": kwargs or {},
                   "class_args": (), "class_kwargs": {}}]
    id = msgid()
    sock.send_multipart([b"", V, b"UNSCHEDULE" if unschedule else b"SCHEDULE", id, queue.encode(),
                         ",".join(headers).encode(), str(interval_secs or -1).encode(),
                         json.dumps(msg).encode(), (cron or "").encode()])
    return id, json.dumps(msg).encode()


def expect_ack(sock, id):
    got = must_recv(sock)
    assert got[2] == b"ACK" and got[4] == id, (got, id)


def schedule_hash(payload):
    """The id EventMQ's scheduler gives a schedule (its schedule_hash)."""
    run = json.loads(payload)[1]
    items = {k: run[k] for k in ("args", "kwargs", "class_args", "class_kwargs", "path", "callable")}
    return hashlib.sha1(json.dumps(items, sort_keys=True).encode("utf-8")).hexdigest()


def schedules():
    with urllib.request.urlopen("http://%s/api/v1/schedules" % admin, timeout=10) as r:
        return json.load(r)["schedules"]


def due(job_msgid):
    """A fire's due time (Unix seconds), the last part of its msgid (in
    nanoseconds)."""
    return int(job_msgid.rsplit(b"-", 1)[1]) / 1e9


worker = ctx.socket(zmq.DEALER)
worker.setsockopt(zmq.IDENTITY, b"py-worker")
worker.connect(backend)
id = msgid()
worker.send_multipart([b"", V, b"INFORM", id, b"ticks", b"worker"])
expect_ack(worker, id)
for _ in range(10):
    worker.send_multipart([b"", V, b"READY", msgid()])
client = ctx.socket(zmq.DEALER)
client.connect(frontend)

# The same schedule() twice: both ACKed, one schedule, named as EventMQ's
# scheduler names it.
tick = {"func_path": "app.tasks.tick", "args": ("caf\u00e9", 1.5, None), "kwargs": {"b": [1, 2], "a": True}}
for _ in range(2):
    id, payload = schedule(client, interval_secs=1, **tick)
    expect_ack(client, id)
kept = schedules()
assert len(kept) == 1 and kept[0]["queue"] == "ticks" and kept[0]["every"] == "1s", kept
assert kept[0]["id"] == schedule_hash(payload), (kept[0]["id"], schedule_hash(payload))

# Its jobs run on the worker: at once, then each second, one per due time.
dues = []
while len(dues) < 3:
    req = must_recv(worker)
    assert req[2] == b"REQUEST" and req[4] == b"ticks" and req[6] == payload, req
    dues.append(due(req[3]))
    worker.send_multipart([b"", V, b"REPLY", msgid(), b"", req[3]])
    worker.send_multipart([b"", V, b"READY", msgid()])
assert dues == sorted(set(dues)) and abs(dues[2] - dues[0] - 2) < 0.001, dues

# A cron schedule, and a bad cron expression refused with bad_request.
id, _ = schedule(client, "app.tasks.nightly", cron="0 3 * * *")
expect_ack(client, id)
id, _ = schedule(client, "app.tasks.never", cron="61 * * * *")
err = must_recv(client)
assert err[2] == b"ERROR" and err[4] == id and err[5] == b"bad_request" and b"cron expression" in err[6], err

# UNSCHEDULE, as schedule(unschedule=True) sends it (interval -1, no cron):
# ACKed, removed, and no job for a due time after it.
for which in [tick, {"func_path": "app.tasks.nightly"}]:
    id, _ = schedule(client, unschedule=True, **which)
    expect_ack(client, id)
unscheduled = time.time()
assert schedules() == [], schedules()
while True:
    req = recv(worker, timeout_s=2.5)  # more than two intervals
    if req is None:
        break
    assert req[2] == b"REQUEST" and due(req[3]) <= unscheduled, ("a fire after UNSCHEDULE", req, unscheduled)
    worker.send_multipart([b"", V, b"REPLY", msgid(), b"", req[3]])

worker.send_multipart([b"", V, b"KBYE", msgid()])
print("ok")
