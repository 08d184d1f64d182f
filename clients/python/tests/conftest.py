"""Real brokers for the tests: the emq binary named by EMQ_BIN, or built
from this checkout with go build when it is unset, started as a child
process on free loopback ports with its data in a temp dir. A replicated
group's etcd is internal/etcdtest/member, built the same way.

Nothing here sleeps to synchronise: eventually() polls a condition with a
deadline.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Callable, Dict, Iterator, List, Optional

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "src"))

_built: Dict[str, str] = {}
_build_lock = threading.Lock()


def _go_build(pkg: str, name: str, tmp: pathlib.Path) -> str:
    with _build_lock:
        if name not in _built:
            go = shutil.which("go") or "/usr/local/go/bin/go"
            if not os.path.exists(go):
                pytest.fail(f"{name}: EMQ_BIN is unset and go is not installed to build {pkg}")
            out = tmp / name
            r = subprocess.run([go, "build", "-o", str(out), pkg], cwd=REPO, capture_output=True, text=True)
            if r.returncode != 0:
                pytest.fail(f"go build {pkg}: {r.stderr}")
            _built[name] = str(out)
        return _built[name]


@pytest.fixture(scope="session")
def bin_dir() -> Iterator[pathlib.Path]:
    d = pathlib.Path(tempfile.mkdtemp(prefix="emq-pytest-bin-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def emq_bin(bin_dir: pathlib.Path) -> str:
    return os.environ.get("EMQ_BIN") or _go_build("./cmd/emq", "emq", bin_dir)


@pytest.fixture(scope="session")
def etcd_member_bin(bin_dir: pathlib.Path) -> str:
    return os.environ.get("EMQ_ETCD_MEMBER_BIN") or _go_build("./internal/etcdtest/member", "etcd-member", bin_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(cond: Callable[[], object], timeout: float = 20.0, what: str = "the condition") -> object:
    """Polls cond until it is truthy, or fails the test at the deadline."""
    end = time.monotonic() + timeout
    delay = 0.005
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(delay)  # a poll's pace, not a synchronisation
        delay = min(delay * 2, 0.1)


def http_json(url: str, timeout: float = 2.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class Broker:
    """One emq broker process, restartable on the same ports and data."""

    def __init__(self, emq: str, data_dir: str, extra: Optional[List[str]] = None, name: str = "b") -> None:
        self.emq = emq
        self.data_dir = data_dir
        self.name = name
        self.extra = extra or []
        self.fport, self.bport, self.aport, self.pport = free_port(), free_port(), free_port(), free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.log = open(os.path.join(data_dir, f"broker-{name}.log"), "ab")

    @property
    def frontend(self) -> str:
        return f"tcp://127.0.0.1:{self.fport}"

    @property
    def backend(self) -> str:
        return f"tcp://127.0.0.1:{self.bport}"

    @property
    def publisher(self) -> str:
        return f"tcp://127.0.0.1:{self.pport}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.aport}"

    def start(self, wait: bool = True) -> "Broker":
        args = [self.emq, "broker", "--frontend", self.frontend, "--backend", self.backend,
                "--admin", f"127.0.0.1:{self.aport}", "--publisher-incoming", "",
                "--publisher-outgoing", self.publisher, "--heartbeat-interval", "250ms",
                "--heartbeat-timeout", "2s", "--drain-timeout", "5s", "--log-level", "warn", *self.extra]
        if not any(a.startswith("--etcd-endpoints") for a in self.extra):
            args += ["--data-dir", self.data_dir]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        if wait:
            self.wait_ready()
        return self

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"broker {self.name} exited with {self.proc.returncode}: {self.tail()}")
        try:
            with urllib.request.urlopen(self.admin + "/readyz", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        eventually(self.ready, timeout, f"broker {self.name} ready")

    def role(self) -> str:
        try:
            return str(http_json(self.admin + "/api/v1/stats").get("group", {}).get("role", ""))  # type: ignore[union-attr]
        except OSError:
            return ""

    def tail(self) -> str:
        try:
            with open(self.log.name, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def start_broker(emq_bin: str, tmp_path: pathlib.Path) -> Iterator[Callable[..., Broker]]:
    started: List[Broker] = []

    def start(extra: Optional[List[str]] = None, name: str = "b", wait: bool = True) -> Broker:
        d = tmp_path / f"data-{name}"
        d.mkdir(exist_ok=True)
        b = Broker(emq_bin, str(d), extra, name)
        started.append(b)
        return b.start(wait)

    yield start
    for b in started:
        b.kill()
        b.log.close()


@pytest.fixture
def broker(start_broker: Callable[..., Broker]) -> Broker:
    return start_broker()


class Etcd:
    """A one-member etcd (internal/etcdtest/member) on loopback."""

    def __init__(self, member: str, data_dir: str) -> None:
        self.client = f"http://127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        cfg = {"Name": "m0", "Dir": data_dir, "Peer": peer, "Client": self.client, "Cluster": f"m0={peer}"}
        env = dict(os.environ, EMQ_TEST_ETCD_MEMBER=json.dumps(cfg))
        self.proc = subprocess.Popen([member], env=env, stderr=subprocess.PIPE)
        eventually(self.healthy, 30, "etcd member healthy")

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"etcd member exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
        try:
            return bool(http_json(self.client + "/health").get("health") == "true")  # type: ignore[union-attr]
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def etcd(etcd_member_bin: str, tmp_path: pathlib.Path) -> Iterator[Etcd]:
    d = tmp_path / "etcd"
    d.mkdir()
    e = Etcd(etcd_member_bin, str(d))
    yield e
    e.stop()
