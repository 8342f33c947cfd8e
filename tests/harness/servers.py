"""The tests' ORS servers: the example's loopback server (examples/serve.py, the SDK's own `Server` under uvicorn)
started as `python -m tests.harness.servers`, which with ORSGEN_COUNT_REQUESTS=1 also logs every request it gets, so
a test asserts on what the server saw: `start()`/`running()` give a `Served` that reads that log.
"""

import atexit
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import AbstractContextManager
from typing import Any, cast

from examples import serve
from examples.serve import HOST, free_port
from tests.harness.processes import wait_until

__all__ = ["HOST", "Counting", "Served", "free_port", "running", "settle", "start"]


class Counting:
    """ASGI wrapper counting requests by "METHOD /path" and tracking open sessions (a 200 on /create opens one,
    /delete closes it). `GET /_requests` returns the counts and resets them; `GET /_sessions` the open ones;
    `GET /_log` every request so far with its session (a `POST /create_session`'s: the id it handed out) and times
    ("arrived", "answered": its answer began, "done": its answer ended), `GET /_headers` with its headers; `GET /_creates` every `POST /create` so far, in the order they arrived: {"session": X-Session-ID, "body": the
    JSON body (it holds "split" and "index"), "status": the response status, "arrived"/"answered": the server's
    monotonic clock when the request came in and when its answer started}."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.counts: dict[str, int] = {}
        self.open: set[str] = set()
        self.creates: list[dict[str, Any]] = []
        self.log: list[dict[str, Any]] = []  # every request: "METHOD /path", session, arrived, answered
        # ORSGEN_CAPACITY=N: at N sessions open (or opening), `POST /create` is refused with 429, as a full sandbox
        # pool refuses; `POST /_capacity` with a number sets it (0: none).
        self.capacity = int(os.environ.get("ORSGEN_CAPACITY", "0"))
        self.opening = 0
        self.peak = 0  # the most sessions open or opening at once (`GET /_peak`)
        self.headers: list[dict[str, Any]] = []  # every request: "METHOD /path" and its headers

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] in ("/_requests", "/_sessions", "/_creates", "/_log", "/_headers", "/_peak"):
            reply: Any = {"/_requests": self.counts, "/_sessions": sorted(self.open), "/_creates": self.creates,
                          "/_log": self.log, "/_headers": self.headers, "/_peak": self.peak}
            reply = reply[scope["path"]]
            if scope["path"] == "/_requests":
                self.counts = {}
            if scope["path"] == "/_peak":  # from now on: the next call's peak
                self.peak = len(self.open) + self.opening
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": json.dumps(reply).encode()})
        if scope["path"] == "/_capacity":
            self.capacity = int(await _read(receive) or 0)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            return await send({"type": "http.response.body", "body": b""})
        key = f"{scope['method']} {scope['path']}"
        self.counts[key] = self.counts.get(key, 0) + 1
        sid = dict(scope["headers"]).get(b"x-session-id", b"").decode()
        logged = {"request": key, "session": sid, "arrived": time.monotonic(), "answered": None, "done": None}
        self.log.append(logged)
        self.headers.append({"request": key, "headers": {k.decode("latin-1"): v.decode("latin-1")
                                                         for k, v in scope["headers"]}})
        created: dict[str, Any] | None = None
        answered: list[bool] = []  # a create's answer began: no longer opening
        if key == "POST /create":
            created = {"session": sid, "body": None, "status": None, "arrived": time.monotonic(), "answered": None}
            self.creates.append(created)  # on arrival, so the log keeps the order the requests came in
            receive = _body_into(created, receive)
            if self.capacity and len(self.open) + self.opening >= self.capacity:
                while (await receive()).get("more_body", False):  # the body, into the log
                    pass
                created["status"], logged["answered"] = 429, time.monotonic()
                created["answered"] = logged["answered"]
                await send({"type": "http.response.start", "status": 429,
                            "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")]})
                return await send({"type": "http.response.body", "body": b'{"detail":"at capacity"}'})
            self.opening += 1
            self.peak = max(self.peak, len(self.open) + self.opening)

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                logged["answered"] = time.monotonic()
                if created is not None:
                    created["status"], created["answered"] = message["status"], time.monotonic()
                    self.opening -= 1  # open now (a 200: in `open` below), or refused
                    answered.append(True)
                if message["status"] == 200 and sid:
                    if key == "POST /create":
                        self.open.add(sid)
                    elif key == "POST /delete":
                        self.open.discard(sid)
            if message["type"] == "http.response.body" and key == "POST /create_session" and not logged["session"]:
                handed = re.search(rb"event: task_id\r?\ndata: ([^\r\n]+)", message.get("body", b""))
                logged["session"] = handed.group(1).decode() if handed else ""
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                logged["done"] = time.monotonic()  # its last byte: a streamed tool result is whole
            await send(message)

        try:
            return await self.app(scope, receive, watch)
        finally:
            if created is not None and not answered:  # it never answered
                self.opening -= 1


async def _read(receive: Any) -> str:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks).decode()


def _body_into(record: dict[str, Any], receive: Any) -> Any:
    """`receive`, also collecting the request body into record["body"] (parsed JSON, or the text if it is not)."""
    chunks: list[bytes] = []

    async def reading() -> dict[str, Any]:
        message = await receive()
        if message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                raw = b"".join(chunks)
                try:
                    record["body"] = json.loads(raw)
                except ValueError:
                    record["body"] = raw.decode(errors="replace")
        return message

    return reading



class Served(serve.Running):
    """A running test server; the readers below need it started with ORSGEN_COUNT_REQUESTS=1."""

    @staticmethod
    def spawn(specs: list[str], port: int, env: dict[str, str]) -> Any:
        """A process forked by the zygote (tests/harness/zygote.py), which imported the SDK and uvicorn once."""
        return _zygote().start(specs, port, env)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 2 s: uvicorn's graceful shutdown waits for every request in flight, and a
        test that leaves a tool sleeping on the server (a call abandoned at its timeout) is not about that wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=2)
        if self.process.poll() is None:
            self.kill()

    def requests(self) -> dict[str, int]:
        """Requests received since the last call (the server must run with ORSGEN_COUNT_REQUESTS=1)."""
        with urllib.request.urlopen(f"{self.url}/_requests", timeout=5) as r:
            return dict(json.loads(r.read()))

    def open_sessions(self) -> list[str]:
        """Sessions created and not deleted (the server must run with ORSGEN_COUNT_REQUESTS=1)."""
        with urllib.request.urlopen(f"{self.url}/_sessions", timeout=5) as r:
            return list(json.loads(r.read()))

    def creates(self) -> list[dict[str, Any]]:
        """Every `POST /create` the server received, in order: {"session", "body" ({"split", "index", ...}),
        "status"} (the server must run with ORSGEN_COUNT_REQUESTS=1)."""
        with urllib.request.urlopen(f"{self.url}/_creates", timeout=5) as r:
            return list(json.loads(r.read()))

    def log(self) -> list[dict[str, Any]]:
        """Every request the server received, in order: {"request", "session", "arrived", "answered", "done"} (the
        server's monotonic clock when it came in, when its answer began and ended: for ordering events, never for
        timing them; the server must run with ORSGEN_COUNT_REQUESTS=1)."""
        with urllib.request.urlopen(f"{self.url}/_log", timeout=5) as r:
            return list(json.loads(r.read()))

    def peak_sessions(self) -> int:
        """The most sessions open or opening on the server at once since the last call (or its start): from a
        `POST /create`'s arrival to its refusal or its `POST /delete`'s answer (the server must run with
        ORSGEN_COUNT_REQUESTS=1)."""
        with urllib.request.urlopen(f"{self.url}/_peak", timeout=5) as r:
            return int(json.loads(r.read()))

    def set_capacity(self, sessions: int) -> None:
        """Refuse `POST /create` with 429 at this many sessions open or opening (0: never); ORSGEN_COUNT_REQUESTS=1."""
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/_capacity", data=str(sessions).encode()), timeout=5)

    def headers(self) -> list[dict[str, Any]]:
        """Every request the server received, in order: {"request": "METHOD /path", "headers": {name: value}} (the
        server must run with ORSGEN_COUNT_REQUESTS=1)."""
        with urllib.request.urlopen(f"{self.url}/_headers", timeout=5) as r:
            return list(json.loads(r.read()))


def settle(timeout: float = 10.0) -> None:
    """Wait until the sessions the runtime is closing in the background are closed (on the server too)."""
    import concurrent.futures

    from orsgen.runtime import client

    if client._loop is not None:
        concurrent.futures.wait(list(client._loop.closing), timeout=timeout)


def start(*specs: str, port: int | None = None, timeout: float = 30.0, env: dict[str, str] | None = None) -> Served:
    return cast(Served, serve.start(*specs, port=port, timeout=timeout, env=env, kind=Served))


def running(*specs: str, port: int | None = None, env: dict[str, str] | None = None) -> AbstractContextManager[Served]:
    return cast(AbstractContextManager[Served], serve.running(*specs, port=port, env=env, kind=Served))


def main() -> None:
    """`python -m tests.harness.servers module:Class ... --port N`: the example's server; with
    ORSGEN_COUNT_REQUESTS=1 it logs every request (what the zygote's children run)."""
    serve.main(wrap=Counting if os.environ.get("ORSGEN_COUNT_REQUESTS") else None)


class Forked:
    """A server process forked by the zygote, as far as the tests use one: poll, wait, send_signal, kill."""

    def __init__(self, zygote: "Zygote", pid: int) -> None:
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.ask({"poll": self.pid})["returncode"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"server {self.pid}", timeout or 0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still this server's
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The test process's end of the zygote: one request, one answer, over its stdin and stdout."""

    def __init__(self, *options: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.harness.zygote", *options], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        atexit.register(self.close)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin and self.process.stdout
        with self.lock:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the server zygote exited with code {self.process.wait()}")
        return dict(json.loads(answer))

    def start(self, specs: list[str], port: int, env: dict[str, str]) -> Forked:
        return Forked(self, self.ask({"start": specs, "port": port, "env": env})["pid"])

    def run(self, argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> Forked:
        """`python -m ARGV` forked (zygote.py's `run`), its own session leader, output into the two files."""
        return Forked(self, self.ask({"run": argv, "cwd": cwd, "env": env, "out": out, "err": err})["pid"])

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


_zygotes: list[Zygote] = []


def command(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> Forked:
    """`python -m ARGV` as a fresh interpreter runs it, forked by the zygote that already imported the SDK."""
    return _zygote().run(argv, cwd, env, out, err)


def _zygote() -> Zygote:
    if not _zygotes or _zygotes[0].process.poll() is not None:
        _zygotes[:] = [Zygote()]
    return _zygotes[0]


_ranks: list[tuple[Zygote, str]] = []


def ranks_socket() -> str:
    """The socket of this process's zygote for torchrun's ranks (tests/harness/rankfork.py), started on first use: it
    preloads TRL besides the SDK, which the servers' zygote need not (the fast tier starts no rank)."""
    if not _ranks or _ranks[0][0].process.poll() is not None:
        path = os.path.join(tempfile.mkdtemp(prefix="orsgen-ranks-"), "socket")
        zygote = Zygote("--ranks", path)
        wait_until(lambda: zygote.process.poll() is not None or os.path.exists(path), timeout=300,
                   waiting_for="the ranks' zygote to import TRL")
        if zygote.process.poll() is not None:
            raise RuntimeError(f"the ranks' zygote exited with code {zygote.process.poll()}")
        _ranks[:] = [(zygote, path)]
    return _ranks[0][1]


if __name__ == "__main__":
    main()
