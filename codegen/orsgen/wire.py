"""The few ORS endpoints the generator reads, spoken with urllib (docs: ors-protocol.md, SDK 0.1.167).

Importing the openreward SDK costs seconds (its package init imports model providers' types); generation needs a
few small endpoints, so it speaks them itself. tests/test_wire.py holds what it reads to what the SDK reads.
"""

import base64
import contextlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orsgen import normalize
from orsgen.errors import OrsgenError

TIMEOUT = 10.0  # per request; opening a session may run the environment's constructor: SESSION_TIMEOUT
SESSION_TIMEOUT = 60.0
RETRIED = (429, 502, 503, 504)  # as the SDK's env-server policy: the server is busy or starting
ATTEMPTS = 3
USER_AGENT = "orsgen"


@dataclass
class Server:
    """One environment on an ORS session server: `base` is the server, `env` the path segment (None: the server's
    default, through its redirect), `deployment` the X-Deployment header."""

    base: str
    deployment: str
    env: str | None
    api_key: str = ""
    secrets: Mapping[str, str] = field(default_factory=dict)  # sent in X-Secrets when a session opens, nowhere else
    platform: bool = False  # the platform routes env-level requests by a session id, as the SDK sends them

    def path(self, suffix: str) -> str:
        return suffix if self.env is None else f"/{self.env}{suffix}"

    def tools(self) -> Any:
        """The raw `/tools` body (the SDK's ToolSpec list drops terminal_tool; its provider formats are lossy)."""
        return self._env_level("GET", self.path("/tools"))

    def splits(self) -> list[str]:
        found = self._env_level("GET", self.path("/splits"))
        if not isinstance(found, list):
            raise OrsgenError(f"{self.base}{self.path('/splits')} did not return a list")
        return [s["name"] if isinstance(s, dict) else str(s) for s in found]

    def num_tasks(self, split: str) -> int:
        found = self._env_level("POST", self.path("/num_tasks"), {"split": split})
        return int(found["num_tasks"])

    def task_range(self, split: str) -> list[Any]:
        found = self._env_level("POST", self.path("/task_range"), {"split": split})
        return list(found["tasks"])

    def task_tools(self, split: str, index: int) -> Any:
        """The tools one task advertises: a session opened on it (`/task_tools` does not wait for its setup)."""
        sid = self._create_session(secrets=True)
        try:
            body: dict[str, Any] = {"split": split, "index": index}
            if self.env is not None:
                body["env_name"] = self.env
            self.request("POST", "/create", body, sid=sid, secrets=True, timeout=SESSION_TIMEOUT)
            try:
                return self.request("GET", self.path("/task_tools"), sid=sid)
            except HTTPStatusError as exc:
                if exc.status != 404:
                    raise
                return self.request("GET", self.path("/tools"), sid=sid)  # a server before task tools: the SDK's way
        finally:
            for path in ("/delete", "/delete_session"):
                with contextlib.suppress(OrsgenError):  # the server reaps what it was not told
                    self.request("POST", path, sid=sid, deployment=False)

    def _env_level(self, method: str, path: str, body: Any = None) -> Any:
        if not self.platform:
            return self.request(method, path, body)
        sid = self._create_session(secrets=False)
        try:
            return self.request(method, path, body, sid=sid)
        finally:
            with contextlib.suppress(OrsgenError):
                self.request("POST", "/delete_session", sid=sid, deployment=False)

    def _create_session(self, secrets: bool) -> str:
        """`POST /create_session`: the session id, from its SSE `task_id` event (or a JSON `sid`)."""
        raw = self.request("POST", "/create_session", {}, secrets=secrets, sse=True, timeout=SESSION_TIMEOUT)
        event = None
        for line in raw.splitlines():
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data" and event == "task_id" and value.strip():
                return value.strip()
            elif name == "data" and value.strip().startswith("{"):
                sid = json.loads(value).get("sid")
                if isinstance(sid, str) and sid:
                    return sid
        raise OrsgenError(f"{self.base}/create_session gave no session id")

    def request(self, method: str, path: str, body: Any = None, *, sid: str | None = None, secrets: bool = False,
                sse: bool = False, deployment: bool = True, timeout: float = TIMEOUT) -> Any:
        """One request, JSON in and out (SSE: the text), retried like the SDK's on 429/502/503/504, following the
        server's 307/308 redirect to its default environment. Errors: one line, without any secret."""
        headers = {"User-Agent": USER_AGENT, "X-API-Key": self.api_key,
                   "Accept": "text/event-stream" if sse else "application/json"}
        if deployment:
            headers["X-Deployment"] = self.deployment
        if sid:
            headers["X-Session-ID"] = sid
        if secrets:
            headers["X-Secrets"] = secrets_header(self.secrets, self.api_key, self.base)
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        url = f"{self.base}{path}"
        for attempt in range(ATTEMPTS):
            try:
                return _send(urllib.request.Request(url, data=data, headers=headers, method=method), timeout, sse)
            except urllib.error.HTTPError as exc:
                if exc.code in (307, 308) and exc.headers.get("Location"):
                    url = urllib.parse.urljoin(url, exc.headers["Location"])
                    continue
                detail = _detail(exc)
                if exc.code in RETRIED and attempt + 1 < ATTEMPTS:
                    time.sleep(_retry_after(exc) or float(2**attempt))
                    continue
                raise HTTPStatusError(self.scrub(f"{url} answered HTTP {exc.code}{': ' + detail if detail else ''}"),
                                      exc.code) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, ConnectionRefusedError):
                    reason = "connection refused: is the server running, on this port?"
                raise OrsgenError(self.scrub(f"cannot reach ORS server at {self.base}: {reason}")) from None
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise OrsgenError(f"{url} did not answer with JSON") from None
        raise OrsgenError(f"{url}: still busy after {ATTEMPTS} attempts")

    def scrub(self, text: str) -> str:
        """Text without the API key or any secret's value, should a server echo one."""
        for value in [self.api_key, *self.secrets.values()]:
            if value:
                text = text.replace(value, "***")
        return text


def platform_sessions() -> str:
    """The platform's session server, as the SDK derives it (`OpenReward().session_base_url`):
    OPENREWARD_SESSION_URL, else `sessions.` + the host of OPENREWARD_URL (https://openreward.ai)."""
    explicit = os.environ.get("OPENREWARD_SESSION_URL")
    if explicit:
        return explicit.rstrip("/")
    base = urllib.parse.urlparse(os.environ.get("OPENREWARD_URL", "https://openreward.ai"))
    return urllib.parse.urlunparse(base._replace(netloc=f"sessions.{base.netloc}")).rstrip("/")


class HTTPStatusError(OrsgenError):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def secrets_header(secrets: Mapping[str, str], api_key: str, base: str) -> str:
    """X-Secrets as the SDK builds it: base64 of {name: {value, allowed_domains}}, with the API key added as the
    secrets `api_key` and `OPENREWARD_API_KEY` (replacing any of those names, as the SDK does). Generation only
    lists tools, so the user's secrets get no allowed domain: a sandbox cannot send them anywhere."""
    payload: dict[str, Any] = {name: {"value": value, "allowed_domains": []} for name, value in secrets.items()}
    host = urllib.parse.urlparse(base).hostname
    for name in ("api_key", "OPENREWARD_API_KEY"):
        payload[name] = {"value": api_key, "allowed_domains": [host] if host else []}
    return base64.b64encode(json.dumps(payload).encode()).decode()


def _send(request: urllib.request.Request, timeout: float, sse: bool) -> Any:
    with _OPENER.open(request, timeout=timeout) as response:
        raw = response.read()
    return raw.decode("utf-8") if sse else normalize.loads(raw, request.full_url)


def _detail(exc: urllib.error.HTTPError) -> str:
    """The server's `detail`, one line, short."""
    try:
        detail = json.loads(exc.read()).get("detail")
    except Exception:  # noqa: BLE001 - an error page that is not JSON says nothing more
        return ""
    text = " ".join(str(detail).split()) if detail else ""
    return text if len(text) <= 200 else text[:197] + "..."


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    try:
        return min(float(exc.headers.get("Retry-After", "")), 10.0)
    except ValueError:
        return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects come back as errors: `request` follows them itself, for POST too, with the same body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)
