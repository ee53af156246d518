"""Real `agora node` processes for the tests, the examples' test and the benchmark: ephemeral
ports on 127.0.0.1, started as the Rust harness starts them; every wait polls a condition until
a deadline. The binary is ``$AGORA_BIN``, else ``agora`` on ``PATH``."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

FACES = ("p2p", "agh", "http", "rpc", "agtp")


def agora_bin() -> str | None:
    """The node binary, or ``None`` when there is none."""
    explicit = os.environ.get("AGORA_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("agora")


class NodeProcess:
    """One running node; :meth:`stop` (or :meth:`kill`) ends it."""

    def __init__(
        self,
        data: Path,
        *,
        bootstrap: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        listen: Mapping[str, str] | None = None,
        start_secs: float = 30.0,
    ) -> None:
        binary = agora_bin()
        if binary is None:
            raise RuntimeError("no agora binary: set AGORA_BIN or put agora on PATH")
        data.mkdir(parents=True, exist_ok=True)
        self.data = data
        self.bootstrap = list(bootstrap)
        self.env = dict(env or {})
        addrs = {
            "agh": "127.0.0.1:0",
            "http": "127.0.0.1:0",
            "rpc": "127.0.0.1:0",
            "p2p": "/ip4/127.0.0.1/tcp/0",
            "agtp": "127.0.0.1:0",
        }
        addrs.update(listen or {})
        args = [binary, "node", "--data", str(data)]
        for face in ("agh", "http", "rpc", "p2p", "agtp"):
            args += [f"--{face}-listen", addrs[face]]
        args += ["--greet-interval", "30"]
        for b in self.bootstrap:
            args += ["--bootstrap", b]
        child_env = {k: v for k, v in os.environ.items() if k != "AGORA_CONFIG"}
        child_env.update(self.env)
        self._log = open(data.parent / f"{data.name}.log", "ab")
        self.proc = subprocess.Popen(
            args,
            cwd=data.parent,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        lines: queue.Queue[str | None] = queue.Queue(maxsize=1024)
        assert self.proc.stdout is not None
        stdout = self.proc.stdout

        def pump() -> None:
            for raw in stdout:
                try:
                    lines.put(raw.decode("utf-8", "replace").rstrip("\n"), timeout=5)
                except queue.Full:
                    pass
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        found: dict[str, str] = {}
        deadline = time.monotonic() + start_secs
        while len(found) < len(FACES):
            left = deadline - time.monotonic()
            try:
                line = lines.get(timeout=max(left, 0.001))
            except queue.Empty:
                line = None
            if line is None:
                self.kill()
                raise RuntimeError(f"the node did not print its listening lines (see {self._log.name})")
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[:2] == ["listening", "on"] and parts[2] in FACES:
                found[parts[2]] = parts[3]
        self.p2p = found["p2p"]
        self.agh = found["agh"]
        self.http = found["http"]
        self.rpc = found["rpc"]
        self.agtp = found["agtp"]
        self.peer_id = self.p2p.rsplit("/", 1)[1]

    def listen_addresses(self) -> dict[str, str]:
        """The addresses it listens on, as ``--*-listen`` takes them (to restart on the same ports)."""
        def hostport(url: str) -> str:
            return url.split("://", 1)[1].split("/", 1)[0]

        return {
            "agh": hostport(self.agh),
            "http": hostport(self.http),
            "rpc": hostport(self.rpc),
            "agtp": hostport(self.agtp),
            "p2p": self.p2p.rsplit("/p2p/", 1)[0],
        }

    def restart(self) -> NodeProcess:
        """Stops this node and starts it again on the same data and ports."""
        listen = self.listen_addresses()
        self.stop()
        return NodeProcess(self.data, bootstrap=self.bootstrap, env=self.env, listen=listen)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.http + path, timeout=10) as r:
            return json.loads(r.read())

    def connected(self) -> list[str]:
        return [str(p) for p in self.get("/status").get("connected", [])]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def eventually(what: str, timeout: float, probe: Callable[[], T | None], every: float = 0.05) -> T:
    """Polls ``probe`` until it returns something other than ``None``; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got is not None:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(every)


def meshed_pair(base: Path, env: Mapping[str, str] | None = None) -> tuple[NodeProcess, NodeProcess]:
    """Nodes A and B (B bootstraps from A), connected to each other."""
    a = NodeProcess(base / "a", env=env)
    try:
        b = NodeProcess(base / "b", bootstrap=[a.p2p], env=env)
    except BaseException:
        a.kill()
        raise
    try:
        eventually("A and B connect", 20, lambda: True if a.peer_id in b.connected() and b.peer_id in a.connected() else None)
    except BaseException:
        a.kill()
        b.kill()
        raise
    return a, b
