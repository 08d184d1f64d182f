"""An EventMQ-style client: sends a ["run", {...}] job the way EventMQ's
send_request does (REQUEST with reply-requested, JSON payload) and prints the
REPLY's payload. Usage: eventmq_client.py FRONTEND"""
import atexit
import json
import sys
import uuid

import zmq

V = b"eMQP/1.0"
sock = zmq.Context().socket(zmq.DEALER)
# Close every socket, then the context, before the interpreter's teardown:
# a context the garbage collector ends before its sockets hangs (pyzmq #1167).
atexit.register(lambda: sock.context.destroy(linger=2000))
sock.connect(sys.argv[1])
msgid = str(uuid.uuid4())
payload = json.dumps(["run", {"path": "mathjobs", "callable": "add", "args": [2, 3],
                              "kwargs": {"scale": 10}, "class_args": [], "class_kwargs": {}}])
sock.send_multipart([b"", V, b"REQUEST", msgid.encode(), b"default", b"reply-requested", payload.encode()])
seen = set()
while "REPLY" not in seen:
    if not sock.poll(10000):
        sys.exit("no answer from the broker; got %s" % sorted(seen))
    frames = [f.decode("utf-8") for f in sock.recv_multipart()]
    seen.add(frames[2])
    if frames[2] == "ERROR":
        sys.exit("ERROR: %r" % frames)
    if frames[2] == "ACK":
        assert frames[4] == msgid, frames
    if frames[2] == "REPLY":
        assert frames[5] == msgid, frames
        print(json.loads(frames[4]))
