"""A libzmq peer (python3-zmq) sending BULKs to an EMQ broker.

Usage: interop_bulk.py FRONTEND BACKEND. A BULK of 1,000 jobs is ACKed
once (its msgid), sent again it is ACKed again and stored once, a worker
gets its jobs in order, and a BULK with a bad job is refused by one ERROR
naming the job. Exits 0 and prints "ok" when every step passed.
"""
import sys


import zmq

from peer import V, ctx, msgid, recv

frontend, backend = sys.argv[1], sys.argv[2]


def bulk(jobs):
    """Sends a BULK of (msgid, queue, headers, payload) and returns its msgid."""
    id = msgid()
    frames = [b"", V, b"BULK", id]
    for job in jobs:
        frames.extend(job)
    client.send_multipart(frames)
    return id


client = ctx.socket(zmq.DEALER)
client.connect(frontend)

jobs = [(msgid(), b"bulk", b"", b"job %d" % i) for i in range(1000)]
first = bulk(jobs)
frames = recv(client)
assert frames[2] == b"ACK" and frames[4] == first, frames
again = bulk(jobs)  # the same jobs again: ACKed, not stored twice
frames = recv(client)
assert frames[2] == b"ACK" and frames[4] == again, frames

bad = [(msgid(), b"bulk", b"", b"a"), (msgid(), b"bulk", b"priority:-1", b"b")]
refused = bulk(bad)
frames = recv(client)
assert frames[2] == b"ERROR" and frames[4] == refused and frames[5] == b"bad_request", frames
assert frames[6].startswith(b'job 1 (msgid "' + bad[1][0] + b'"): '), frames

worker = ctx.socket(zmq.DEALER)
worker.connect(backend)
worker.send_multipart([b"", V, b"INFORM", msgid(), b"bulk", b"worker"])
frames = recv(worker)
assert frames[2] == b"ACK", frames
for _ in range(len(jobs) + 1):
    worker.send_multipart([b"", V, b"READY", msgid()])
for i, job in enumerate(jobs):
    frames = recv(worker)
    assert frames[2] == b"REQUEST" and frames[3] == job[0] and frames[6] == job[3], (i, frames)
    worker.send_multipart([b"", V, b"REPLY", msgid(), b"done", job[0]])
if worker.poll(300):  # nothing stored twice, nothing of the refused bulk
    frames = recv(worker)
    assert frames[2] != b"REQUEST", frames
print("ok")
