"""EMQ's Python package: send jobs to an EMQ broker (Client), run them
(Worker), and receive what is published (Subscriber), over eMQP/1.0 on
pyzmq alone.

    import emq
    with emq.Client("tcp://127.0.0.1:47290") as c:
        msgid = c.send("email", b'{"to": "ana@example.com"}', job_timeout=30)

    w = emq.Worker("tcp://127.0.0.1:47291", slots=8)

    @w.handle("email")
    def email(job: emq.Job) -> bytes:
        return b"sent"

    w.run()  # until w.stop(): a graceful stop
"""

from ._wire import ProtocolError, new_id
from .client import BulkJob, Client, job_headers
from .errors import (BadRequestError, BrokerError, BulkError, ClosedError, ConflictError, DuplicateError,
                     EMQError, ForbiddenError, MovedError, NotFoundError, QueueFullError, Timeout,
                     TooLargeError, UnavailableError, UnknownCommandError, UnsupportedVersionError)
from .subscriber import Message, Subscriber
from .worker import Job, JobCancelled, Worker

__version__ = "0.1.0"

__all__ = [
    "BadRequestError", "BrokerError", "BulkError", "BulkJob", "Client", "ClosedError", "ConflictError",
    "DuplicateError", "EMQError", "ForbiddenError", "Job", "JobCancelled", "Message", "MovedError",
    "NotFoundError", "ProtocolError", "QueueFullError", "Subscriber", "Timeout", "TooLargeError",
    "UnavailableError", "UnknownCommandError", "UnsupportedVersionError", "Worker", "job_headers", "new_id",
]
