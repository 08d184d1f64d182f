"""eMQP/1.0 frames as EMQ speaks them (docs/protocol.md): msgids, headers,
encoding every command and decoding what a peer receives.

Pure: no sockets here. decode() checks a message as the broker's decoder
does, and names the class of what is wrong (ProtocolError.kind), the
classes of the wire cases in emqp-vectors.json.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

VERSION = b"eMQP/1.0"
MAX_ID_LEN = 255
MAX_QUEUE_LEN = 255
MAX_TOPIC_LEN = 1024
MAX_PROGRESS_LEN = 1024
CRON_INTERVAL = -1
DEFAULT_WEIGHT = 10

HeaderValue = Union[str, int, float, bool, None]
Headers = Mapping[str, HeaderValue]

# Frames after the command's msgid, checked exactly: (least, most).
_FRAMES: Dict[str, Tuple[int, int]] = {
    "REQUEST": (7, 7),
    "ERROR": (7, 7),
    "ACK": (5, 5),
    "CANCEL": (5, 5),
    "INFORM": (5, 6),
    "REPLY": (5, 6),
    "FAIL": (6, 6),
    "PUBLISH": (6, 6),
    "PROGRESS": (6, 6),
    "HEARTBEAT": (4, 5),
    "ROUTES": (4, 5),
    "SCHEDULE": (9, 9),
    "UNSCHEDULE": (9, 9),
    "READY": (4, 4),
    "KBYE": (4, 4),
    "DISCONNECT": (4, 4),
}


class ProtocolError(ValueError):
    """A message that is not eMQP/1.0 as EMQ speaks it. kind is the class
    of the fault: frames, envelope, version, command, msgid, queue, queues,
    headers, interval, cron, topic or progress."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(f"{kind}: {text}")
        self.kind = kind
        self.text = text


# -- msgids ---------------------------------------------------------------

_id_lock = threading.Lock()
_id_last_ms = 0
_id_seq = 0
_id_pool = b""


def new_id() -> str:
    """A new msgid: a UUIDv7 string, time-ordered (the milliseconds since
    the epoch first, then a counter within the millisecond, then random),
    as EMQ's Go libraries make them."""
    global _id_last_ms, _id_seq, _id_pool
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms > _id_last_ms:
            _id_last_ms, _id_seq = ms, 0
        else:  # the same millisecond (or a clock step back): count on
            ms = _id_last_ms
            _id_seq += 1
            if _id_seq > 0xFFF:
                _id_last_ms += 1
                ms, _id_seq = _id_last_ms, 0
        if len(_id_pool) < 8:
            _id_pool = os.urandom(1024)
        rnd, _id_pool = _id_pool[:8], _id_pool[8:]
        seq = _id_seq
    n = (ms << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | (int.from_bytes(rnd, "big") >> 2)
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# -- headers --------------------------------------------------------------


def _value(v: HeaderValue) -> Optional[str]:
    """A header value as the wire has it; None leaves the item out, ""
    is a flag."""
    if v is None or v is False:
        return None
    if v is True:
        return ""
    if isinstance(v, float):
        return repr(v) if v != int(v) else str(int(v))
    return str(v)


def encode_headers(headers: Optional[Headers]) -> bytes:
    """Headers as a frame: comma-separated items (name, or name:value), or,
    when a name or value would not survive that (a comma in it, a colon in
    a name, spaces at either end), a JSON object. True makes a flag; None
    and False leave the item out."""
    if not headers:
        return b""
    items = []
    csv = True
    for name, v in headers.items():
        s = _value(v)
        if s is None or not name:
            continue
        items.append((name, s))
        if ("," in name or ":" in name or name.startswith("{") or name.strip() != name
                or "," in s or s.strip() != s):
            csv = False
    if csv:
        return ",".join(n if s == "" else f"{n}:{s}" for n, s in items).encode()
    return json.dumps({n: (True if s == "" else s) for n, s in items},
                      separators=(",", ":"), ensure_ascii=False).encode()


def parse_headers(frame: bytes) -> Dict[str, str]:
    """A headers frame as a dict: a flag maps to ""; the last of a repeated
    name counts. Raises ProtocolError("headers") on a frame the broker
    would refuse."""
    try:
        s = frame.decode()
    except UnicodeDecodeError:
        raise ProtocolError("headers", "headers are not valid UTF-8 text") from None
    out: Dict[str, str] = {}
    if s.startswith("{"):
        bad = "headers are not a JSON object of strings, numbers and booleans"
        try:
            obj = json.loads(s, parse_float=str, parse_int=str)
        except ValueError as e:
            raise ProtocolError("headers", f"{bad}: {e}") from None
        if not isinstance(obj, dict):
            raise ProtocolError("headers", bad)
        for k, v in obj.items():
            if k == "":
                raise ProtocolError("headers", f"{bad}: a key is empty")
            if v is True:
                out[k] = ""
            elif v is False or v is None:
                out.pop(k, None)
            elif isinstance(v, str):
                out[k] = v
            else:
                raise ProtocolError("headers", f"{bad}: {k!r} is neither")
        return out
    for i, item in enumerate(s.split(",")):
        name, colon, value = item.partition(":")
        name = name.strip()
        if colon and not name:
            raise ProtocolError("headers", f"header item {i + 1} has a colon but no name")
        if name:
            out[name] = value.strip()
    return out


# -- encoding -------------------------------------------------------------


def _b(x: Union[str, bytes]) -> bytes:
    return x.encode() if isinstance(x, str) else x


def message(command: bytes, msgid: str, *frames: Union[str, bytes]) -> List[bytes]:
    """One message as a DEALER sends it: '', eMQP/1.0, command, msgid,
    frames."""
    return [b"", VERSION, command, msgid.encode(), *(_b(f) for f in frames)]


def encode_queues(queues: Sequence[Tuple[int, str]]) -> bytes:
    """An INFORM's queue list, EventMQ's JSON form [[weight, name], ...]."""
    return json.dumps([[w, n] for w, n in queues], separators=(",", ":"), ensure_ascii=False).encode()


# -- decoding -------------------------------------------------------------


class Message:
    """A decoded message: command, msgid, and the command's fields as
    attributes (fields), named as in the wire cases (queue, headers,
    payload, orig_msgid, acked_msgid, ref_msgid, code, text, ...)."""

    __slots__ = ("command", "msgid", "fields")

    def __init__(self, command: str, msgid: str, fields: Dict[str, object]) -> None:
        self.command = command
        self.msgid = msgid
        self.fields = fields

    def __getattr__(self, name: str) -> object:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"Message({self.command}, {self.msgid!r}, {self.fields!r})"


def _text(b: bytes, kind: str, what: str) -> str:
    try:
        return b.decode()
    except UnicodeDecodeError:
        raise ProtocolError(kind, f"{what} is not valid UTF-8") from None


def _id(b: bytes, what: str = "msgid") -> str:
    if not b:
        raise ProtocolError("msgid", f"the {what} is empty")
    if len(b) > MAX_ID_LEN:
        raise ProtocolError("msgid", f"the {what} is {len(b)} bytes, over {MAX_ID_LEN}")
    return _text(b, "msgid", f"the {what}")


def _queue(b: bytes) -> str:
    if not b:
        raise ProtocolError("queue", "the queue name is empty")
    if len(b) > MAX_QUEUE_LEN:
        raise ProtocolError("queue", f"the queue name is {len(b)} bytes, over {MAX_QUEUE_LEN}")
    return _text(b, "queue", "the queue name")


def _queues(b: bytes) -> List[List[object]]:
    s = _text(b, "queues", "the queue list")
    if not s.strip():
        return []
    if s.lstrip().startswith("["):
        try:
            v = json.loads(s)
        except ValueError as e:
            raise ProtocolError("queues", f"the queue list is not JSON: {e}") from None
        out: List[List[object]] = []
        for q in v if isinstance(v, list) else [None]:
            if (not isinstance(q, list) or len(q) != 2 or not isinstance(q[0], int)
                    or not isinstance(q[1], str) or not q[1]):
                raise ProtocolError("queues", "each queue must be [weight, name]")
            out.append([q[0], q[1]])
        return out
    return [[DEFAULT_WEIGHT, n.strip()] for n in s.split(",") if n.strip()]


def _progress(b: bytes) -> Dict[str, object]:
    if len(b) > MAX_PROGRESS_LEN:
        raise ProtocolError("progress", f"progress is {len(b)} bytes, over {MAX_PROGRESS_LEN}")
    text = _text(b, "progress", "progress")
    head, _, rest = text.partition(" ")
    if head.isdigit() and head.isascii() and int(head) <= 100:
        return {"text": text, "percent": int(head), "note": rest}
    return {"text": text, "percent": -1, "note": text}


def decode(frames: Sequence[bytes]) -> Message:
    """Decode a message as a DEALER receives it (or, after the routing id,
    a ROUTER). Raises ProtocolError naming what is wrong."""
    if len(frames) < 4:
        if len(frames) >= 2 and frames[1] != VERSION and frames[0] == b"":
            raise ProtocolError("version", f"frame 1 is {frames[1][:16]!r}, not eMQP/1.0")
        raise ProtocolError("frames", f"{len(frames)} frames; every message has at least 4")
    if frames[0] != b"":
        raise ProtocolError("envelope", "frame 0 is not empty")
    if frames[1] != VERSION:
        raise ProtocolError("version", f"frame 1 is {frames[1][:16]!r}, not eMQP/1.0")
    cmd = frames[2].decode("latin-1")
    n = len(frames)
    if cmd == "BULK":
        if n < 8 or (n - 4) % 4:
            jobs, extra = divmod(n - 4, 4)
            if n == 4:
                raise ProtocolError("frames", "BULK needs at least one job")
            raise ProtocolError("frames", f"BULK has 4 + 4 frames a job; got {n - 4} ({jobs} jobs and {extra} frames)")
    elif cmd not in _FRAMES:
        raise ProtocolError("command", f"unknown command {frames[2][:32]!r}")
    else:
        lo, hi = _FRAMES[cmd]
        if not lo <= n <= hi:
            want = str(lo) if lo == hi else f"{lo} or {hi}"
            raise ProtocolError("frames", f"{cmd} has {want} frames, not {n}")
    msgid = _id(frames[3])
    f: Dict[str, object] = {}
    if cmd == "REQUEST":
        f["queue"] = _queue(frames[4])
        f["headers"] = parse_headers(frames[5])
        f["payload"] = frames[6]
    elif cmd in ("SCHEDULE", "UNSCHEDULE"):
        f["queue"] = _queue(frames[4])
        f["headers"] = parse_headers(frames[5])
        try:
            interval = int(frames[6])
        except ValueError:
            raise ProtocolError("interval", f"interval {frames[6][:32]!r} is not a whole number") from None
        cron = _text(frames[8], "cron", "the cron expression")
        if interval == CRON_INTERVAL and not cron.strip() and cmd == "SCHEDULE":
            raise ProtocolError("cron", "interval -1 needs a cron expression")
        f["interval"], f["payload"], f["cron"] = interval, frames[7], cron
    elif cmd == "ACK":
        f["acked_msgid"] = _id(frames[4], "acked msgid")
    elif cmd == "CANCEL":
        f["orig_msgid"] = _id(frames[4], "job's msgid")
    elif cmd == "REPLY":
        f["payload"] = frames[4]
        f["orig_msgid"] = _id(frames[5], "job's msgid") if n == 6 else msgid
    elif cmd == "FAIL":
        f["orig_msgid"] = _id(frames[4], "job's msgid")
        f["reason"] = frames[5].decode(errors="replace")
    elif cmd == "ERROR":
        f["ref_msgid"] = frames[4].decode(errors="replace")
        f["code"] = frames[5].decode(errors="replace")
        f["text"] = frames[6].decode(errors="replace")
    elif cmd == "INFORM":
        f["queues"] = _queues(frames[4])
        f["peer_type"] = frames[5].decode(errors="replace") if n == 6 else ""
    elif cmd == "HEARTBEAT":
        f["time"] = frames[4].decode(errors="replace") if n == 5 else ""
    elif cmd == "ROUTES":
        f["table"] = frames[4].decode(errors="replace") if n == 5 else ""
    elif cmd == "PUBLISH":
        if len(frames[4]) > MAX_TOPIC_LEN:
            raise ProtocolError("topic", f"the topic is {len(frames[4])} bytes, over {MAX_TOPIC_LEN}")
        f["topic"], f["message"] = frames[4], frames[5]
    elif cmd == "PROGRESS":
        f["orig_msgid"] = _id(frames[4], "job's msgid")
        f.update(_progress(frames[5]))
    elif cmd == "BULK":
        jobs = []
        for i in range(4, n, 4):
            k = (i - 4) // 4
            jid = frames[i].decode(errors="replace") if len(frames[i]) <= MAX_ID_LEN else ""
            try:
                job = {"msgid": _id(frames[i], "msgid"), "queue": _queue(frames[i + 1]),
                       "headers": parse_headers(frames[i + 2]), "payload": frames[i + 3]}
            except ProtocolError as e:
                raise ProtocolError(e.kind, f"job {k} (msgid {json.dumps(jid)}): {e.text}") from None
            jobs.append(job)
        f["jobs"] = jobs
    return Message(cmd, msgid, f)
