"""A recording HTTP stub in front of a real ORS server, for tests of what a client sends and how it rides out
failures: `stub(upstream, fault=...)` serves on 127.0.0.1 (stdlib `http.server` in a thread), records the method,
path, headers and body of every request (`seen`), and forwards it to `upstream` (the SDK's own `Server`, from
`servers.running`) unless `fault(request)` answers it instead: a deployment still starting, a body cut off, a
redirect loop (`starting`, `cut`, `redirect_loop` below). Redirects from upstream are passed back, not followed.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from examples.serve import HOST, free_port

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Seen:
    """One request as it arrived: header names lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)
    status: int | None = None  # what the stub answered


@dataclass
class Reply:
    """An answer the stub makes up (status 0: the upstream's answer). `cut`: send the headers (Content-Length of the
    whole body) and only this many bytes of the body (negative: all but that many), then close the connection: a
    connection dropped mid-body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    cut: int | None = None


Fault = Callable[[Seen], Reply | None]


class Stub:
    def __init__(self, upstream: str | None, fault: Fault | None = None, port: int | None = None) -> None:
        self.upstream = urllib.parse.urlparse(upstream) if upstream else None
        self.fault = fault
        self.seen: list[Seen] = []
        self.port = port or free_port()
        self.url = f"http://{HOST}:{self.port}"
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Stub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length) if length else b"")
                stub.seen.append(seen)
                reply = stub.fault(seen) if stub.fault else None
                if reply is None or reply.status == 0:
                    forwarded = stub._forward(seen)
                    reply = forwarded if reply is None else Reply(forwarded.status, forwarded.headers, forwarded.body,
                                                                  reply.cut)
                seen.status = reply.status
                self._answer(reply)

            do_GET = do_POST = do_DELETE = do_PUT = _any

            def _answer(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(reply.body if reply.cut is None else reply.body[: reply.cut])
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: object) -> None:  # quiet: the record is `seen`
                pass

        self._server = ThreadingHTTPServer((HOST, self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _forward(self, seen: Seen) -> Reply:
        if self.upstream is None:
            return Reply(404, {"Content-Type": "application/json"}, b'{"detail":"Not Found"}')
        connection = http.client.HTTPConnection(self.upstream.hostname or HOST, self.upstream.port, timeout=60)
        try:
            headers = {k: v for k, v in seen.headers.items() if k not in HOP}
            connection.request(seen.method, seen.path, body=seen.body or None, headers=headers)
            response = connection.getresponse()
            body = response.read()
            kept = {k: v for k, v in response.getheaders() if k.lower() not in HOP}
            return Reply(response.status, kept, body)
        finally:
            connection.close()

    def requests(self, *, without: tuple[str, ...] = ()) -> list[Seen]:
        """What arrived, in order, leaving out the paths in `without`."""
        return [s for s in self.seen if s.path not in without]


@contextlib.contextmanager
def stub(upstream: str | None, fault: Fault | None = None, port: int | None = None) -> Iterator[Stub]:
    running = Stub(upstream, fault, port).start()
    try:
        yield running
    finally:
        running.stop()


def starting(seconds: float, retry_after: str = "0") -> Fault:
    """The platform's answer while a deployment is still starting (503, X-Backend-State: starting), to every
    request for `seconds` from the first one (math.inf: for ever)."""
    first: list[float] = []

    def fault(seen: Seen) -> Reply | None:
        if not first:
            first.append(seen.at)
        if seen.at - first[0] >= seconds:
            return None
        return Reply(503, {"Content-Type": "application/json", "X-Backend-State": "starting",
                           "Retry-After": retry_after}, b'{"detail":"Environment still starting."}')

    return fault


def cut(path: str, times: float, keep: int = 5) -> Fault:
    """The first `times` requests for `path` (math.inf: all) get the upstream's status line and headers and its body
    cut off after `keep` bytes (negative: before its last -keep bytes)."""
    count = [0]

    def fault(seen: Seen) -> Reply | None:
        if seen.path != path or count[0] >= times:
            return None
        count[0] += 1
        return Reply(0, cut=keep)

    return fault


def redirect_loop(seen: Seen) -> Reply:
    """Every request is sent back to itself."""
    return Reply(308, {"Location": seen.path})
