"""The decoder and the encoders against the wire cases every eMQP decoder
must pass (../shared/emqp-vectors.json, emqp/testdata/vectors-ext.json)."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re

import pytest

from emq import _wire

REPO = pathlib.Path(__file__).resolve().parents[3]
FILES = [REPO.parent / "shared" / "emqp-vectors.json", REPO / "emqp" / "testdata" / "vectors-ext.json"]


def cases():
    out = []
    for path in FILES:
        if not path.exists():
            if path.name == "emqp-vectors.json" and not os.environ.get("EMQ_REQUIRE_PYTHON"):
                continue  # ../shared is beside the checkout in CI only
            raise FileNotFoundError(path)
        for c in json.loads(path.read_text())["decode"]:
            out.append(pytest.param(c, id=f"{path.name}: {c['name']}"))
    return out


def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


@pytest.mark.parametrize("case", cases())
def test_vectors(case):
    frames = [f.encode() for f in case["frames"]] + [base64.b64decode(f) for f in case.get("frames_b64", [])]
    if "error" in case:
        with pytest.raises(_wire.ProtocolError) as e:
            _wire.decode(frames)
        assert e.value.kind == case["error"], str(e.value)
        if "error_text" in case:
            assert case["error_text"] in str(e.value)
        return
    m = _wire.decode(frames)
    got = {"command": m.command, "msgid": m.msgid, **plain(m.fields)}
    assert got == case["want"]


@pytest.mark.parametrize("headers", [
    {"reply-requested": True, "timeout": 30, "retry-count": 3},
    {"tracestate": "a=1,b=2", "priority": 5},
    {"a": "x:y", "flag": True, "gone": False, "none": None},
    {" spaced": "v"},
])
def test_headers_round_trip(headers):
    want = {k: ("" if v is True else str(v)) for k, v in headers.items() if v not in (None, False)}
    assert _wire.parse_headers(_wire.encode_headers(headers)) == want


def test_headers_csv_when_they_fit():
    assert _wire.encode_headers({"reply-requested": True, "timeout": 30}) == b"reply-requested,timeout:30"
    assert _wire.encode_headers({"tracestate": "a=1,b=2"}).startswith(b"{")


def test_new_id_is_a_time_ordered_uuid7():
    ids = [_wire.new_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for i in ids[:50]:
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", i), i
