"""A libzmq worker with CURVE keys: INFORMs for queue "secured", takes one
job, REPLYs with its payload upper-cased and prints DONE.
Usage: interop_secured_worker.py BACKEND SERVERKEY PUBLIC SECRET"""
import atexit
import sys
import uuid

import zmq

V = b"eMQP/1.0"


def msgid():
    return str(uuid.uuid4()).encode()


sock = zmq.Context().socket(zmq.DEALER)
# Close every socket, then the context, before the interpreter's teardown:
# a context the garbage collector ends before its sockets hangs (pyzmq #1167).
atexit.register(lambda: sock.context.destroy(linger=2000))
sock.setsockopt(zmq.LINGER, 2000)
sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = [a.encode() for a in sys.argv[2:5]]
sock.connect(sys.argv[1])


def recv(want):
    while True:
        if not sock.poll(10000):
            sys.exit("no %s from the broker" % want)
        frames = sock.recv_multipart()
        if frames[2] == want:
            return frames
        if frames[2] == b"ERROR":
            sys.exit("ERROR: %r" % frames)


sock.send_multipart([b"", V, b"INFORM", msgid(), b"secured", b"worker"])
recv(b"ACK")
sock.send_multipart([b"", V, b"READY", msgid()])
job = recv(b"REQUEST")
sock.send_multipart([b"", V, b"REPLY", msgid(), job[6].upper(), job[3]])
print("DONE")
