"""EventMQ's own client (github.com/eventmq/eventmq on PYTHONPATH) sends a
job and a schedule with tenant:acme among its headers, as its users can:
send_emqp_message with a headers frame of their own, and schedule() with
headers=(...). Usage: eventmq_tenant.py FRONTEND; prints the two msgids."""
import os.path
import sys

from eventmq.client.messages import schedule
from eventmq.sender import Sender
from eventmq.utils.messages import send_emqp_message

sender = Sender()
sender.connect(sys.argv[1])
payload = '["run", {"path": "os.path", "callable": "join", "args": ["a", "b"]}]'
job = send_emqp_message(sender, "REQUEST", ("default", "reply-requested,tenant:acme", payload))
sched = schedule(sender, os.path.join, interval_secs=3600, args=("c", "d"), headers=("guarantee", "tenant:acme"))
for want in (job, sched):
    if not sender.zsocket.poll(10000):
        sys.exit("no ACK from the broker")
    frames = [f.decode("utf-8") for f in sender.zsocket.recv_multipart()]
    if frames[2] != "ACK":
        sys.exit("got %r, want an ACK" % frames)
print(job)
sender.zsocket.close(linger=2000)
