"""The few ORS endpoints the generator reads, spoken with urllib (docs: ors-protocol.md, SDK 0.1.167).

Importing the openreward SDK costs seconds (its package init imports model providers' types); generation needs a
few small endpoints, so it speaks them itself, failing as the SDK's env-server client fails (`Retry`) and sending
what it sends. tests/test_wire.py holds what it reads to what the SDK reads; tests/test_wire_semantics.py its
failures and its requests, against a recording stub.
"""

import base64
import contextlib
import http.client
import json
import math
import os
import re
import socket
import ssl
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
TIMEOUT_VARIABLE = "ORSGEN_WIRE_TIMEOUT"  # seconds, when set: every request's limit (both of the above)
# The SDK's env-server retry policy (openreward/api/_session/http.py): these statuses and every transport error
# (refused, reset, timed out, cut off mid-body) are retried; others are the answer.
RETRIED = (429, 502, 503, 504)
ATTEMPTS = 3  # a plain request: request_retryable's 3 attempts, waits 1, 2 s (exponential, capped at WAIT_CAP)
SSE_ATTEMPTS = 4  # an SSE request (/create_session): resumable_sse's max_retries=3, waits 0.5, 1, 2 s
WAIT_CAP = 10.0  # a Retry-After in seconds is honoured up to this
# A deployment the platform reports as still starting (503 + X-Backend-State: starting) is ridden out this long
# from the first attempt, as the SDK does (_STARTING_RIDE_OUT_S, OPENREWARD_STARTING_RIDE_OUT_S): bring-up under an
# autoscale ramp takes minutes. ORSGEN_WIRE_STARTING_BUDGET overrides it (tests shrink it).
STARTING_BUDGET = 600.0
MAX_REDIRECTS = 10  # aiohttp's default: a redirect loop ends in one line
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

    def task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[Any]:
        """The split's task specs (`start`, `stop`: a slice of them, as Python slices)."""
        body: dict[str, Any] = {"split": split, **({} if start is None else {"start": start}),
                                **({} if stop is None else {"stop": stop})}
        found = self._env_level("POST", self.path("/task_range"), body)
        return list(found["tasks"])

    def version(self) -> Any:
        """`GET /version` (its `build_sha`); on the platform inside a throwaway session, as every request there is
        sent with one (the SDK reads it as `session.version()`, in a session)."""
        return self._env_level("GET", "/version")

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
        """`POST /create_session`: the session id, as the SDK reads it: the `sid` of the `end` event's JSON, else
        the stream's `task_id` event."""
        events = self.request("POST", "/create_session", {}, secrets=secrets, sse=True, timeout=SESSION_TIMEOUT)
        with contextlib.suppress(ValueError, AttributeError):
            sid = json.loads(events["end"]).get("sid") if events["end"].strip() else None
            if isinstance(sid, str) and sid:
                return sid
        task_id = events.get("task_id", "").strip()
        if task_id:
            return task_id
        raise OrsgenError(f"{self.base}/create_session gave no session id")

    def request(self, method: str, path: str, body: Any = None, *, sid: str | None = None, secrets: bool = False,
                sse: bool = False, deployment: bool = True, timeout: float = TIMEOUT) -> Any:
        """One request, JSON in and out (SSE: its events), failing as the SDK's env-server client does (`Retry`),
        following 307/308 redirects (at most MAX_REDIRECTS). Errors: one line, without any secret."""
        timeout = request_timeout(timeout)
        headers = self._headers(sid=sid, secrets=secrets, sse=sse, deployment=deployment)
        payload = body
        retry = Retry(sse)
        while True:
            where = [f"{self.base}{path}"]  # each attempt from the start, its redirects too, as the SDK's
            try:
                return self._attempt(method, where, payload, headers, timeout, sse)
            except urllib.error.HTTPError as exc:
                failure = self._http_failure(exc, where[-1])
            except _SSEError as exc:
                raise OrsgenError(self.scrub(f"{where[-1]}: the server answered with an error event: {exc}")[:300]) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                failure = self._transport_failure(exc, where[-1], timeout)
                if sse and failure.task_id:  # resumed, as the SDK resumes a stream it had the task id of
                    payload = {**(body or {}), "task_id": failure.task_id}
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise OrsgenError(f"{where[-1]} did not answer with JSON") from None
            wait = retry.after(failure)
            if wait is None:
                raise retry.final(failure) from None
            time.sleep(wait)

    def _attempt(self, method: str, where: list[str], payload: Any, headers: dict[str, str], timeout: float,
                 sse: bool) -> Any:
        """One attempt, following 307/308 redirects (method and body kept) up to MAX_REDIRECTS; `where` gets each
        URL asked, so a failure names the one that failed."""
        data = None if payload is None else json.dumps(payload).encode()
        url = where[-1]
        for _ in range(MAX_REDIRECTS + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            if data is not None:
                request.add_header("Content-Type", "application/json")
            elif method == "POST":  # what aiohttp sends with an empty POST, so both clients look the same
                request.add_header("Content-Type", "application/octet-stream")
            try:
                return _send(request, timeout, sse)
            except urllib.error.HTTPError as exc:
                if exc.code not in (307, 308) or not exc.headers.get("Location"):
                    raise
                url = urllib.parse.urljoin(url, exc.headers["Location"])
                where.append(url)
        raise Unreachable(self.scrub(f"{where[0]}: more than {MAX_REDIRECTS} redirects, to {url} (a redirect loop)"), 308)

    def _headers(self, *, sid: str | None, secrets: bool, sse: bool, deployment: bool) -> dict[str, str]:
        """The SDK's headers: an SSE request names its stream and carries X-API-Key only when there is a key."""
        headers = {"User-Agent": USER_AGENT, "Accept": "text/event-stream" if sse else "*/*"}
        if self.api_key or not sse:
            headers["X-API-Key"] = self.api_key
        if sid:
            headers["X-Session-ID"] = sid
        if deployment and self.deployment:
            headers["X-Deployment"] = self.deployment
        if secrets:
            headers["X-Secrets"] = secrets_header(self.secrets, self.api_key, self.base)
        return headers

    def _http_failure(self, exc: urllib.error.HTTPError, url: str) -> "Failure":
        detail = _detail(exc)
        text = f"{url} answered HTTP {exc.code}{': ' + detail if detail else ''}"
        if self.platform and exc.code == 404:
            text += f": is {self.deployment} spelt as the catalog lists it (owner/name)?"
        elif self.platform and exc.code in (401, 403):
            text += ": is OPENREWARD_API_KEY the key of an account that may use it?"
        error = HTTPStatusError(self.scrub(text), exc.code)
        retry_after = (exc.headers.get("Retry-After") or "").strip()
        return Failure(error, retried=exc.code in RETRIED, starting=exc.headers.get("X-Backend-State") == "starting",
                       retry_after=float(retry_after) if retry_after.isdigit() else None)  # the SDK's parse

    def _transport_failure(self, exc: BaseException, url: str, timeout: float) -> "Failure":
        """A request that got no whole answer: refused, not found in DNS, reset, timed out, or cut off mid-body."""
        if isinstance(exc, http.client.IncompleteRead):
            task_id = _sse_events(exc.partial.decode("utf-8", "replace")).get("task_id")
            text = f"{url}: the answer was cut off ({len(exc.partial)} bytes read, {exc.expected} more expected)"
            return Failure(OrsgenError(self.scrub(text)), task_id=task_id)
        # urllib wraps what fails while connecting in a URLError; a read that timed out comes as it is
        reason = getattr(exc, "reason", exc) if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError) and not isinstance(exc, urllib.error.URLError):
            text = (f"{url}: no answer within {timeout:g} s (the server took the connection): stuck, or slow? "
                    f"{TIMEOUT_VARIABLE}=SECONDS waits longer")
        elif isinstance(exc, (http.client.HTTPException, ConnectionResetError)) and not isinstance(exc, TimeoutError):
            text = f"{url}: the server dropped the connection ({type(exc).__name__}: {exc})"
        else:
            text = f"cannot reach {self._what()}: {_why(reason, self.base, timeout)}: {self._hint(reason)}"
        return Failure(OrsgenError(self.scrub(text)))

    def _what(self) -> str:
        """The server a request could not reach, and where its URL came from."""
        if not self.platform:
            return f"ORS server at {self.base}"
        origin = ("OPENREWARD_SESSION_URL" if os.environ.get("OPENREWARD_SESSION_URL") else
                  "from OPENREWARD_URL" if os.environ.get("OPENREWARD_URL") else "the SDK's default")
        return f"the session server of catalog environment {self.deployment}, {self.base} ({origin})"

    def _hint(self, reason: BaseException) -> str:
        """What to check when a server cannot be reached at all."""
        if self.platform:
            variable = ("and OPENREWARD_SESSION_URL" if os.environ.get("OPENREWARD_SESSION_URL") else
                        "and OPENREWARD_URL" if os.environ.get("OPENREWARD_URL") else
                        "or set OPENREWARD_SESSION_URL to the session server")
            return f"check the network or proxy (HTTPS_PROXY), {variable}"
        if isinstance(reason, ConnectionRefusedError):
            return "is the server running, on this port?"
        if isinstance(reason, socket.gaierror):
            return "check the host name in the URL, and the network or proxy (HTTPS_PROXY)"
        return "check the URL, and the network or proxy (HTTPS_PROXY)"

    def scrub(self, text: str) -> str:
        """Text without the API key or any secret's value, should a server echo one: whole, cut short (an error
        detail is shortened before this), or as the base64 X-Secrets header that carries them."""
        values = [v for v in [self.api_key, *self.secrets.values()] if v]
        if values:
            values.append(secrets_header(self.secrets, self.api_key, self.base))
        for value in values:
            text = text.replace(value, "***")
        return _TOKEN.sub(lambda m: "***" if any(m.group() in v for v in values) else m.group(), text)


_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{8,}")  # a run that may be part of a key or of base64: masked if it is one


def _why(reason: BaseException, base: str, timeout: float) -> str:
    """Why a connection failed, in words rather than an errno."""
    host = urllib.parse.urlsplit(base).hostname or base
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        found = "name not known" if reason.errno == socket.EAI_NONAME else "no answer from DNS: offline?"
        return f"the DNS lookup of {host} failed ({found})"
    if isinstance(reason, TimeoutError):
        return f"connecting timed out after {timeout:g} s ({TIMEOUT_VARIABLE}=SECONDS waits longer)"
    if isinstance(reason, ssl.SSLError):
        return f"the TLS handshake failed ({getattr(reason, 'reason', None) or reason})"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[:1].lower() + reason.strerror[1:]
    return str(reason) or type(reason).__name__


def request_timeout(default: float) -> float:
    """Seconds a request may wait: ORSGEN_WIRE_TIMEOUT when set (for every request), else `default`."""
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise OrsgenError(f"{TIMEOUT_VARIABLE}={value!r}: give the seconds a request may wait, a number above 0 "
                          f"(default {TIMEOUT:g}, {SESSION_TIMEOUT:g} to open a session)")
    return seconds


def starting_budget() -> float:
    """Seconds a starting deployment is waited for: ORSGEN_WIRE_STARTING_BUDGET, else the SDK's
    OPENREWARD_STARTING_RIDE_OUT_S, else STARTING_BUDGET (read when used)."""
    for name in ("ORSGEN_WIRE_STARTING_BUDGET", "OPENREWARD_STARTING_RIDE_OUT_S"):
        with contextlib.suppress(KeyError, ValueError):
            return float(os.environ[name])
    return STARTING_BUDGET


def backoff_scale() -> float:
    """ORSGEN_WIRE_BACKOFF_SCALE (default 1) multiplies every wait between attempts: tests shorten them with it."""
    try:
        return max(0.0, float(os.environ.get("ORSGEN_WIRE_BACKOFF_SCALE", "1")))
    except ValueError:
        return 1.0


@dataclass
class Failure:
    """One failed attempt: what is raised if it is the last, and what the retry policy reads of it."""

    error: OrsgenError
    retried: bool = True  # the SDK retries it (a retried status, or a transport error)
    starting: bool = False  # 503 with X-Backend-State: starting
    retry_after: float | None = None
    task_id: str | None = None  # an SSE stream cut off after its task id: the next attempt resumes it


class Retry:
    """The SDK's env-server policy, as request_retryable (plain) and resumable_sse (SSE) implement it: a retried
    failure is retried up to ATTEMPTS (SSE_ATTEMPTS) attempts, after a Retry-After in seconds (capped at WAIT_CAP)
    or an exponential wait; a deployment still starting, until starting_budget() has passed since the first attempt.
    Unlike resumable_sse, whose count restarts at every 200, a stream cut off every time ends too."""

    def __init__(self, sse: bool) -> None:
        self.sse = sse
        self.failures = 0
        self.started = time.monotonic()

    def after(self, failure: Failure) -> float | None:
        """Seconds to wait before the next attempt, or None: `final(failure)` is the answer."""
        self.failures += 1
        if not failure.retried:
            return None
        if failure.starting:
            if time.monotonic() - self.started >= starting_budget():
                return None
        elif self.failures >= (SSE_ATTEMPTS if self.sse else ATTEMPTS):
            return None
        if failure.retry_after is not None:
            wait = min(failure.retry_after, WAIT_CAP)
        elif self.sse:
            wait = min(WAIT_CAP, 0.5 * 2 ** (self.failures - 1))
        else:  # tenacity's wait_exponential(multiplier=1, min=1, max=10)
            wait = min(max(1.0, 2.0 ** (self.failures - 1)), WAIT_CAP)
        return wait * backoff_scale()

    def final(self, failure: Failure) -> OrsgenError:
        """The one line a failure ends with: how long or how often it was retried."""
        if not failure.retried:
            return failure.error
        if failure.starting:
            text = (f"{failure.error}: the deployment was still starting after {time.monotonic() - self.started:.0f} s"
                    f" (orsgen waits {starting_budget():g} s, as the SDK does; ORSGEN_WIRE_STARTING_BUDGET sets it)")
        else:
            text = f"{failure.error} ({self.failures} attempts)"
        return Unreachable(text, failure.error.status if isinstance(failure.error, HTTPStatusError) else 0)


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


class Unreachable(HTTPStatusError):
    """Retried as the SDK retries, still failing: the server is down, busy, starting, cuts its answers off or loops
    its redirects (`status`: the last HTTP status, 0 for a transport error)."""


def secrets_header(secrets: Mapping[str, str], api_key: str, base: str) -> str:
    """X-Secrets as the SDK builds it: base64 of {name: {value, allowed_domains}}, with the API key added as the
    secrets `api_key` and `OPENREWARD_API_KEY` (replacing any of those names), allowed the domains the SDK allows
    it (`api_key_domains`). Generation only lists tools, so the user's secrets get no allowed domain: a sandbox
    cannot send them anywhere."""
    payload: dict[str, Any] = {name: {"value": value, "allowed_domains": []} for name, value in secrets.items()}
    domains = api_key_domains(base)
    for name in ("api_key", "OPENREWARD_API_KEY"):
        payload[name] = {"value": api_key, "allowed_domains": domains}
    return base64.b64encode(json.dumps(payload).encode()).decode()


def api_key_domains(base: str) -> list[str]:
    """Where a sandbox may send the API key, as the SDK's `augment_secrets_with_api_key` lists it: the session
    server's host and the platform API's (`OpenReward().base_url`: OPENREWARD_API_URL, else `api.` + the host of
    OPENREWARD_URL), the first-party search service's (OPENREWARD_WEB_SEARCH_URL, _FETCH_URL), then the
    `<first label>.openreward.internal` of each host with three labels or more."""
    web = urllib.parse.urlparse(os.environ.get("OPENREWARD_URL", "https://openreward.ai"))
    api = os.environ.get("OPENREWARD_API_URL") or urllib.parse.urlunparse(web._replace(netloc=f"api.{web.netloc}"))
    domains: list[str] = []
    for url in (base, api):
        host = urllib.parse.urlparse(url).hostname
        if host:
            domains.append(host)
    for name, default in (("OPENREWARD_WEB_SEARCH_URL", "https://search.openreward.ai/search"),
                          ("OPENREWARD_WEB_FETCH_URL", "https://search.openreward.ai/fetch")):
        host = urllib.parse.urlparse(os.environ.get(name, default)).hostname
        if host and host not in domains:
            domains.append(host)
    return domains + [f"{host.split('.')[0]}.openreward.internal" for host in domains if len(host.split(".")) >= 3]


def _send(request: urllib.request.Request, timeout: float, sse: bool) -> Any:
    """The answer: JSON, or an SSE stream's events (name -> data) once its `end` event arrived."""
    with _OPENER.open(request, timeout=timeout) as response:
        raw = response.read()
    if not sse:
        return normalize.loads(raw, request.full_url)
    events = _sse_events(raw.decode("utf-8", "replace"))
    if "error" in events:
        raise _SSEError(" ".join(events["error"].split())[:200] or "unknown error")
    if "end" not in events:  # the SDK's "Stream ended unexpectedly": retried, resuming from the task id
        raise http.client.IncompleteRead(raw)
    return events


def _sse_events(text: str) -> dict[str, str]:
    """Server-sent events as the SDK parses them: an event is dispatched at its blank line (a stream cut off before
    it has not sent it); the last data of each name."""
    events: dict[str, str] = {}
    event: str | None = None
    data: list[str] = []
    for line in text.splitlines():
        if not line:
            if event:
                events[event] = "\n".join(data)
            event, data = None, []
        elif not line.startswith(":") and ":" in line:
            name, value = line.split(":", 1)
            if name == "event":
                event = value.lstrip()
            elif name == "data":
                data.append(value.lstrip())
    return events


class _SSEError(Exception):
    """The stream's `error` event: the server's answer, not retried."""


def _detail(exc: urllib.error.HTTPError) -> str:
    """The server's `detail`, one line, short."""
    try:
        detail = json.loads(exc.read()).get("detail")
    except Exception:  # noqa: BLE001 - an error page that is not JSON says nothing more
        return ""
    text = " ".join(str(detail).split()) if detail else ""
    return text if len(text) <= 200 else text[:197] + "..."


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects come back as errors: `request` follows them itself, for POST too, with the same body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)
