"""Run ORS environments with the openreward SDK's own `Server` under uvicorn, on 127.0.0.1: `orsgen serve`
(codegen/orsgen/serve.py), started and stopped for the examples and the tests.

`python -m examples.serve module:Class [module:Class ...] --port N` is `orsgen serve` with the same arguments;
`running(...)` starts `orsgen serve` in a subprocess, waits for `/health`, and stops it afterwards. (The tests'
servers, which also log what they were asked, are tests/harness/servers.py.)
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from orsgen import serve
from orsgen.serve import HOST


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def load(spec: str) -> type:  # an openreward Environment subclass
    """The Environment subclass "module:Class" names (orsgen.serve.ServeError if it names none)."""
    return serve.load(spec)


def main(specs: list[str] | None = None, wrap: Callable[[Any], Any] | None = None) -> None:
    """Serve the environments `specs` (or the command line's) until stopped; `wrap(app)` is the ASGI app served. The
    rest of the command line is `orsgen serve`'s (--port N, --host). Exits with its code if that is not 0."""
    code = serve.main([*(specs or []), *sys.argv[1:]], wrap=wrap)
    if code:
        raise SystemExit(code)


@dataclass
class Running:
    url: str
    process: Any  # a subprocess.Popen, or what acts as one

    @staticmethod
    def spawn(specs: list[str], port: int, env: dict[str, str]) -> Any:
        """The server's process (a Popen, or what acts as one): `orsgen serve SPECS --port PORT`."""
        cmd = [sys.executable, "-m", "orsgen", "serve", *specs, "--port", str(port)]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)

    def kill(self) -> None:
        """Die without closing anything, as a crashed server does."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(*specs: str, port: int | None = None, timeout: float = 30.0, env: dict[str, str] | None = None,
          kind: type[Running] = Running) -> Running:
    """Serve `specs` in a process of their own (`kind.spawn`) and return a `kind` once it is healthy."""
    port = port or free_port()
    process = kind.spawn(list(specs), port, {**os.environ, **(env or {})})
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ORS server {' '.join(specs)} exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                if json.loads(r.read()).get("status") == "ok":
                    return kind(url, process)
        except OSError:
            time.sleep(0.1)
    Running(url, process).stop()
    raise RuntimeError(f"ORS server {' '.join(specs)} did not become healthy at {url} in {timeout}s")


@contextlib.contextmanager
def running(*specs: str, port: int | None = None, env: dict[str, str] | None = None,
            kind: type[Running] = Running) -> Iterator[Running]:
    server = start(*specs, port=port, env=env, kind=kind)
    try:
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    main()
