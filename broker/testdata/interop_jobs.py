"""A libzmq peer (python3-zmq) sending the headers and commands of
priorities, unique jobs, cancelling and progress to an EMQ broker.

Usage: interop_jobs.py FRONTEND BACKEND. It prints "progress MSGID" once
the broker has a PROGRESS of job MSGID and waits for a line on stdin
before it goes on; it exits 0 and prints "ok" when every step passed.
"""
import sys

import zmq

from peer import V, ctx, msgid, recv

frontend, backend = sys.argv[1], sys.argv[2]


def request(queue, headers, payload=b"x"):
    id = msgid()
    client.send_multipart([b"", V, b"REQUEST", id, queue, headers, payload])
    return id


def answer(id):
    frames = recv(client)
    assert frames[4] == id, (frames, id)
    return frames


def acked(queue, headers):
    id = request(queue, headers)
    frames = answer(id)
    assert frames[2] == b"ACK", frames
    return id


def sync(sock):
    """Returns once the broker has handled what sock sent before."""
    id = msgid()
    sock.send_multipart([b"", V, b"SYNC", id])
    frames = recv(sock)
    assert frames[2] == b"ERROR" and frames[4] == id, frames


client = ctx.socket(zmq.DEALER)
client.connect(frontend)
worker = ctx.socket(zmq.DEALER)
worker.setsockopt(zmq.IDENTITY, b"py-jobs-worker")
worker.connect(backend)

# Priorities: lower first, FIFO among equals, 1024 without the header.
order = [acked(b"prio", h) for h in (b"priority:9", b"priority:1", b"", b"priority:0", b"priority:1", b"priority:2000")]
want = [order[3], order[1], order[4], order[0], order[2], order[5]]
id = msgid()
worker.send_multipart([b"", V, b"INFORM", id, b"prio,cancel-me,progress", b"worker"])
assert recv(worker)[2] == b"ACK"
got = []
for _ in want:
    worker.send_multipart([b"", V, b"READY", msgid()])
    frames = recv(worker)
    assert frames[2] == b"REQUEST", frames
    got.append(frames[3])
    worker.send_multipart([b"", V, b"REPLY", msgid(), b"", frames[3]])
assert got == want, (got, want)

# A unique key: the second REQUEST is refused, naming the first.
holder = acked(b"uniq", b"unique:report-7,unique-for:3600")
other = request(b"uniq", b"unique:report-7")
frames = answer(other)
assert frames[2] == b"ERROR" and frames[5] == b"duplicate", frames
assert frames[6].decode().endswith("is held by job " + holder.decode()), frames
# The same msgid again is ACKed.
client.send_multipart([b"", V, b"REQUEST", holder, b"uniq", b"unique:report-7", b"x"])
assert answer(holder)[2] == b"ACK"

# Bad values, refused by name.
for headers, name in ((b"priority:high", "header priority"), (b"priority:70000", "header priority"),
                      (b"unique:k,unique-for:-1", "header unique-for"), (b"unique-for:5", "header unique-for")):
    frames = answer(request(b"bad", headers))
    assert frames[2] == b"ERROR" and frames[5] == b"bad_request" and name in frames[6].decode(), (headers, frames)

# Cancelling a running job: the worker is told, its REPLY after is ignored
# (the client asked for one and gets none), the client's CANCEL is ACKed.
job = acked(b"cancel-me", b"reply-requested")
worker.send_multipart([b"", V, b"READY", msgid()])
frames = recv(worker)
assert frames[2] == b"REQUEST" and frames[3] == job, frames
cancel = msgid()
client.send_multipart([b"", V, b"CANCEL", cancel, job])
frames = answer(cancel)
assert frames[2] == b"ACK", frames
frames = recv(worker)
assert frames[2] == b"CANCEL" and frames[4] == job and len(frames) == 5, frames
worker.send_multipart([b"", V, b"REPLY", msgid(), b"late", job])
sync(worker)
again = msgid()
client.send_multipart([b"", V, b"CANCEL", again, job])
frames = answer(again)
assert frames[2] == b"ERROR" and frames[5] in (b"conflict", b"not_found"), frames

# Progress of a running job.
job = acked(b"progress", b"")
worker.send_multipart([b"", V, b"READY", msgid()])
frames = recv(worker)
assert frames[2] == b"REQUEST" and frames[3] == job, frames
worker.send_multipart([b"", V, b"PROGRESS", msgid(), job, b"50 halfway"])
sync(worker)
print("progress", job.decode(), flush=True)
sys.stdin.readline()
worker.send_multipart([b"", V, b"REPLY", msgid(), b"", job])
sync(worker)
print("ok")
