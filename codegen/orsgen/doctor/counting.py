"""`python -m orsgen.doctor.counting MODULE:CLASS --port 0`: `orsgen serve`, counting the sessions open on it.

`orsgen doctor MODULE:CLASS` serves the environment this way, so its lifecycle check reads what the server itself
holds open at the end (`GET /_orsgen_doctor/sessions`: {"open": N}): a session opens with a 200 on `POST /create`
and ends with a 200 on `POST /delete`, as the SDK's server keeps them. The SDK's server exposes no such count.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from orsgen import serve

PATH = "/_orsgen_doctor/sessions"


class Counting:
    """An ASGI wrapper around the SDK's app: the ids of the sessions open on it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.open: set[str] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == PATH:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": json.dumps({"open": len(self.open)}).encode()})
        key = f"{scope['method']} {scope['path']}"
        sid = dict(scope["headers"]).get(b"x-session-id", b"").decode()

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200 and sid:
                if key == "POST /create":
                    self.open.add(sid)
                elif key == "POST /delete":
                    self.open.discard(sid)
            await send(message)

        return await self.app(scope, receive, watch)


if __name__ == "__main__":
    raise SystemExit(serve.main(sys.argv[1:], wrap=Counting))
