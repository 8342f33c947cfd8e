"""A local stand-in for the OpenReward API's rollout endpoints, for tests of the runs-page upload: `standin()` serves
on 127.0.0.1 (stdlib `http.server` in a thread, a free port), records every request (`seen`: method, path, headers,
JSON body) and answers as the openreward SDK expects (openreward/api/rollouts/background.py, rollout.py):

- `POST /v1/rollouts` `{"events": [...]}`: a rollout's start (one event, eventType "rollout", sent alone and waited
  for), then its messages ("message") and updates ("rollout_update") in batches; any JSON answer will do.
- `GET /v1/environments/{owner}/{name}`: the environment's `{"id": ...}`, asked before each start of an
  "Owner/Name" environment.

`mode` switches every later answer: "ok", "fail" (500, which the SDK retries 4 times), "refuse" (401, not retried)
or "hang" (no answer until the stand-in stops).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from examples.serve import HOST, free_port


@dataclass
class Seen:
    """One request as it arrived: header names lower-cased, the body as text and as JSON (None if it is not)."""

    method: str
    path: str
    headers: dict[str, str]
    text: str
    body: Any
    status: int | None = None


class Standin:
    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.seen: list[Seen] = []
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.release = threading.Event()  # set at stop: hanging requests end, unanswered
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> Standin:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, raw, body)
                with standin._lock:
                    standin.seen.append(seen)
                mode = standin.mode
                if mode == "hang":
                    standin.release.wait()
                    self.close_connection = True
                    return
                status, reply = standin.answer(seen, mode)
                seen.status = status
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args: object) -> None:  # quiet: the record is `seen`
                pass

        self._server = ThreadingHTTPServer((HOST, self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="rollout-standin", daemon=True).start()
        return self

    @staticmethod
    def answer(seen: Seen, mode: str) -> tuple[int, Any]:
        if mode == "fail":
            return 500, {"detail": "the stand-in fails on purpose"}
        if mode == "refuse":
            return 401, {"detail": "the stand-in refuses on purpose"}
        if seen.method == "POST" and seen.path == "/v1/rollouts":
            return 200, {"ok": True}
        parts = seen.path.strip("/").split("/")
        if seen.method == "GET" and len(parts) == 4 and parts[:2] == ["v1", "environments"]:
            return 200, {"id": f"env-{parts[2]}-{parts[3]}"}
        if seen.method == "GET" and len(parts) == 5 and parts[4] == "variants":
            return 200, []
        return 404, {"detail": "Not Found"}

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- what arrived ----------------------------------------------------------------------------------------------

    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every event of every answered `POST /v1/rollouts` (status 200), in arrival order; `kind`: only that
        eventType ("rollout", "message", "rollout_update")."""
        found = [e for s in self.requests() if s.method == "POST" and s.path == "/v1/rollouts" and s.status == 200
                 for e in (s.body or {}).get("events", [])]
        return [e for e in found if kind is None or e.get("eventType") == kind]

    def rollouts(self) -> list[dict[str, Any]]:
        """One entry per rollout started: its start event, with "messages" (by index) and "updates" added."""
        found = {e["eventId"]: {**e, "messages": [], "updates": []} for e in self.events("rollout")}
        for event in self.events("message"):
            found[event["rolloutEventId"]]["messages"].append(event)
        for event in self.events("rollout_update"):
            found[event["eventId"]]["updates"].append(event)
        for rollout in found.values():
            rollout["messages"].sort(key=lambda m: m["index"])
        return list(found.values())


@contextlib.contextmanager
def standin(mode: str = "ok") -> Iterator[Standin]:
    running = Standin(mode).start()
    try:
        yield running
    finally:
        running.stop()


def record(**over: Any) -> dict[str, Any]:
    """A trajectory record of the echo environment (one hint, one scored echo), with `over` replacing keys."""
    base = {
        "schema": "orsgen.trajectory/1", "run": "r", "step": 2, "rank": 0, "stream": "train",
        "environment": "Owner/Echo", "adapter": "Echo", "split": "train", "task_index": 3,
        "task_spec": {"id": "t3", "target": "apple"},
        "prompt": [{"role": "system", "content": "Use the tools."},
                   {"role": "user", "content": [{"type": "text", "text": "Echo the word apple"}]}],
        "completion": [
            {"role": "assistant", "content": "Calling echo.",
             "tool_calls": [{"type": "function", "function": {"name": "hint", "arguments": {}}},
                            {"type": "function", "function": {"name": "echo", "arguments": {"word": "apple"}}}]},
            {"role": "tool", "name": "hint", "content": "a fruit"},
            {"role": "tool", "name": "echo", "content": "right"},
            {"role": "assistant", "content": "Done."}],
        "tool_calls": [{"name": "hint", "arguments": {}, "result": "a fruit", "error": None, "seconds": 0.01,
                        "reward": None, "finished": False},
                       {"name": "echo", "arguments": {"word": "apple"}, "result": "right", "error": None,
                        "seconds": 0.02, "reward": 1.0, "finished": True}],
        "reward": 1.0, "scored": True, "unscored_reason": None, "finished": True, "start_error": None,
        "seconds": {"reset": 0.05, "tools": 0.03, "episode": 1.25}, "ended_at": "2026-12-02T07:30:00.123Z"}
    return {**base, **over}
