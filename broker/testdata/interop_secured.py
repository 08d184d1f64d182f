"""A libzmq client with CURVE keys, a PLAIN user, or neither (NULL) sends
one REQUEST and prints ACK, or "no answer" within 1.5 s.
Usage: interop_secured.py FRONTEND curve SERVERKEY PUBLIC SECRET
       interop_secured.py FRONTEND plain USER PASSWORD
       interop_secured.py FRONTEND null"""
import atexit
import sys
import uuid

import zmq

sock = zmq.Context().socket(zmq.DEALER)
# Close every socket, then the context, before the interpreter's teardown:
# a context the garbage collector ends before its sockets hangs (pyzmq #1167).
atexit.register(lambda: sock.context.destroy(linger=2000))
sock.setsockopt(zmq.LINGER, 0)
mode = sys.argv[2]
if mode == "curve":
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = [a.encode() for a in sys.argv[3:6]]
elif mode == "plain":
    sock.plain_username, sock.plain_password = sys.argv[3].encode(), sys.argv[4].encode()
sock.connect(sys.argv[1])
msgid = str(uuid.uuid4()).encode()
sock.send_multipart([b"", b"eMQP/1.0", b"REQUEST", msgid, b"interop", b"", b"payload"])
if not sock.poll(1500):
    print("no answer")
    sys.exit(0)
frames = sock.recv_multipart()
print(frames[2].decode())
