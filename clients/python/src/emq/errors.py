"""The exceptions of the emq package. A broker's refusal (an ERROR frame)
is a BrokerError carrying the broker's code; each code has its subclass,
so ``except emq.DuplicateError`` reads as what it catches."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Type


class EMQError(Exception):
    """The base of every error this package raises."""


class ClosedError(EMQError):
    """A call on a closed Client, Worker or Subscriber."""


class Timeout(EMQError, TimeoutError):
    """No answer came in time. For a request, ``stored`` says whether the
    broker had ACKed the job (it is durable, and runs) before the wait
    ended; ``last_error`` is the last ERROR unavailable, if one came."""

    def __init__(self, text: str, msgid: str = "", stored: bool = False,
                 last_error: Optional["BrokerError"] = None) -> None:
        super().__init__(text)
        self.msgid = msgid
        self.stored = stored
        self.last_error = last_error


class BrokerError(EMQError):
    """The broker refused a message: ``code`` is its machine code
    (bad_request, queue_full, ...), ``text`` its sentence for a person,
    ``msgid`` the refused message's."""

    code = ""

    def __init__(self, code: str, text: str, msgid: str = "") -> None:
        super().__init__(f"broker refused the message: {code}: {text}")
        self.code = code
        self.text = text
        self.msgid = msgid


class BadRequestError(BrokerError):
    """bad_request: a malformed message or a known header with a bad value."""


class UnsupportedVersionError(BrokerError):
    """unsupported_version."""


class UnknownCommandError(BrokerError):
    """unknown_command: the broker does not know the command."""


class TooLargeError(BrokerError):
    """too_large: a frame, a job or a bulk over the broker's bounds."""


class QueueFullError(BrokerError):
    """queue_full: the queue holds --max-pending jobs; nothing stored."""


class UnavailableError(BrokerError):
    """unavailable: the broker is stopping, cannot write, or (a group) has
    no majority. Send and its kin retry it until their timeout; it is
    raised only where a call is not retried."""


class ForbiddenError(BrokerError):
    """forbidden: this peer's roles do not allow the command."""


class DuplicateError(BrokerError):
    """duplicate: another job of the queue holds the unique key; ``holder``
    is its msgid. Nothing was stored."""

    @property
    def holder(self) -> str:
        i = self.text.rfind(" is held by job ")
        return self.text[i + len(" is held by job "):] if i >= 0 else ""


class NotFoundError(BrokerError):
    """not_found: cancel of a job the broker does not hold."""


class ConflictError(BrokerError):
    """conflict: cancel of a job done, dead or cancelled already."""


_MOVED = re.compile(r"is served by shard ([A-Za-z0-9_.-]{1,64}) at ([^ ]+) \(placement ([0-9]+)\)$")


class MovedError(BrokerError):
    """moved: the queue is another shard's. The Client follows it by
    itself; it is raised only when the placement keeps changing."""

    @property
    def shard(self) -> str:
        m = _MOVED.search(self.text)
        return m.group(1) if m else ""

    @property
    def endpoints(self) -> List[str]:
        m = _MOVED.search(self.text)
        return m.group(2).split(",") if m else []

    @property
    def version(self) -> int:
        m = _MOVED.search(self.text)
        return int(m.group(3)) if m else 0


class BulkError(BrokerError):
    """The broker refused a bulk: none of its jobs was stored. ``index``
    (from 0) and ``job_msgid`` name the first job refused; ``index`` is -1
    when the refusal is the whole bulk's. ``code`` is what that job's
    send would have got."""

    def __init__(self, code: str, text: str, msgid: str = "", index: int = -1, job_msgid: str = "") -> None:
        super().__init__(code, text, msgid)
        self.index = index
        self.job_msgid = job_msgid


_BY_CODE: Dict[str, Type[BrokerError]] = {
    "bad_request": BadRequestError,
    "unsupported_version": UnsupportedVersionError,
    "unknown_command": UnknownCommandError,
    "too_large": TooLargeError,
    "queue_full": QueueFullError,
    "unavailable": UnavailableError,
    "forbidden": ForbiddenError,
    "duplicate": DuplicateError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "moved": MovedError,
}


def broker_error(code: str, text: str, msgid: str = "") -> BrokerError:
    """The exception of an ERROR frame: the subclass of its code."""
    return _BY_CODE.get(code, BrokerError)(code, text, msgid)


_BULK_JOB = re.compile(r'(?:^|: )job ([0-9]+) \(msgid "((?:[^"\\]|\\.)*)"\): ')


def bulk_error(code: str, text: str, msgid: str = "") -> BulkError:
    """A bulk's ERROR: its text names the first job refused."""
    m = _BULK_JOB.search(text)
    if not m:
        return BulkError(code, text, msgid)
    return BulkError(code, text[m.end():], msgid, int(m.group(1)), m.group(2))
