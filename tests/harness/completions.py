"""A scripted stand-in for vLLM's OpenAI-compatible `/v1/completions`, on 127.0.0.1 only, for TRL's async GRPO worker.

The worker sends token ids (`"prompt": [ids]`, `"return_token_ids": true`, `"logprobs": 0`) and reads back
`choices[0]["token_ids"]` and `choices[0]["logprobs"]["token_logprobs"]`. Here the prompt ids are decoded with the
tokenizer, `script(prompt_text)` says what the "model" writes, and that text is tokenized back. Every request is
recorded with its arrival and answer time (`time.monotonic()`), so tests can see what the worker asked and when.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"


@dataclass
class Request:
    path: str
    payload: dict[str, Any]
    prompt_text: str
    completion_text: str
    received: float
    answered: float


@dataclass
class Completions:
    url: str
    requests: list[Request] = field(default_factory=list)
    other_paths: list[str] = field(default_factory=list)  # anything but POST /v1/completions: the worker needs none


@contextmanager
def serving(tokenizer: Any, script: Callable[[str], str]) -> Iterator[Completions]:
    """Serve `/v1/completions` for `tokenizer`; `script(prompt_text)` returns the completion text of each request."""
    lock = threading.Lock()
    state: Completions

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: aiohttp's connection pool reuses connections

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            with lock:
                state.other_paths.append(f"GET {self.path}")
            self._reply(404, {"error": "not scripted"})

        def do_POST(self) -> None:
            received = time.monotonic()
            payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path != "/v1/completions":
                with lock:
                    state.other_paths.append(f"POST {self.path}")
                return self._reply(404, {"error": "not scripted"})
            prompt_text = tokenizer.decode(payload["prompt"], skip_special_tokens=False)
            try:
                text = script(prompt_text)
            except Exception as exc:  # noqa: BLE001 - shown to the test through the recorded request
                text = f"script failed: {exc!r}<|eot|>"
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][: payload.get("max_tokens") or None]
            body = {
                "id": f"cmpl-{len(state.requests)}",
                "object": "text_completion",
                "model": payload.get("model"),
                "choices": [{
                    "index": 0,
                    "text": tokenizer.decode(ids, skip_special_tokens=False),
                    "token_ids": ids,
                    "logprobs": {"token_logprobs": [-0.25] * len(ids)},
                    "finish_reason": "stop",
                }],
            }
            with lock:
                state.requests.append(Request(self.path, payload, prompt_text, text, received, time.monotonic()))
            self._reply(200, body)

    server = ThreadingHTTPServer((HOST, 0), Handler)
    server.daemon_threads = True
    state = Completions(url=f"http://{HOST}:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, name="scripted-completions", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
