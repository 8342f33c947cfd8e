"""What `orsgen doctor` and `orsgen replay` run against: a TARGET resolved to a live environment (`Live`).

A URL or a catalog name is read as the generator reads it (source.fetch: the tools, splits and terminal tool, no
import of the SDK); a generated module (or a [tool.orsgen] target name) is its pinned environment, read live the
same way; `MODULE:CLASS` is served on 127.0.0.1 by `python -m orsgen.doctor.counting` (`orsgen serve`, counting
the sessions open on it) for as long as the `Live` is open, then stopped.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from types import ModuleType
from typing import IO, Any

from orsgen import source, wire
from orsgen.errors import OrsgenError

SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # MODULE:CLASS (a URL has a scheme, a catalog name a slash)
SERVE_WAIT = 120.0  # seconds for `orsgen serve` to import the environment and listen


@dataclass
class Served:
    """`MODULE:CLASS` served on 127.0.0.1 by a process of its own, which counts the sessions open on it."""

    spec: str
    process: subprocess.Popen[str]
    url: str
    log: IO[str]

    def open_sessions(self) -> int | None:
        """Sessions open on the server now, as it counts them (None: it did not answer)."""
        try:
            with urllib.request.urlopen(f"{self.url}/_orsgen_doctor/sessions", timeout=5) as answer:
                return int(json.loads(answer.read())["open"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@dataclass
class Live:
    """One live environment: where its sessions open and what it serves (`snapshot`: the generator's reading)."""

    target: str  # as given
    url: str | None  # the session server; None: the platform's (OPENREWARD_SESSION_URL, else the SDK's)
    deployment: str
    env: str | None
    snapshot: dict[str, Any]
    origin: source.Source  # what generation reads (`learnable` renders a module from it)
    module: ModuleType | None = None  # a generated module given as TARGET
    served: Served | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.env or self.deployment

    @property
    def where(self) -> str:
        return self.url or f"{wire.platform_sessions()} (the catalog's session server)"

    def server(self) -> wire.Server:
        """The generator's client of this environment (env-level requests without the SDK)."""
        key = os.environ.get("OPENREWARD_API_KEY", "")
        if self.url is not None:
            return wire.Server(self.url, deployment=self.deployment, env=self.env, api_key=key)
        return wire.Server(wire.platform_sessions(), deployment=self.deployment, env=self.env, api_key=key,
                           platform=True)

    def splits(self) -> list[str]:
        found = self.snapshot.get("splits") or []
        return [s if isinstance(s, str) else str(s.get("name")) for s in found if isinstance(s, (str, dict))]

    def close(self) -> None:
        if self.served is not None:
            self.served.stop()


def resolve(target: str, env: str | None = None) -> Live:
    """The live environment TARGET names; OrsgenError, one line, when it names none or cannot be read."""
    if re.match(r"https?://", target) or source.CATALOG.fullmatch(target):
        origin, snap = source.fetch(target.rstrip("/"), env)
        return Live(target, origin.url, origin.deployment, origin.env, snap, origin)
    if SPEC.fullmatch(target) and not target.endswith(".py"):
        served = serve(target)
        try:
            origin, snap = source.fetch(served.url, env)
        except BaseException:
            served.stop()
            raise
        return Live(target, served.url, origin.deployment, origin.env, snap, origin, served=served)
    if target.endswith(".py") or not re.search(r"[/:]", target):
        return _module(target, env)
    raise OrsgenError(f"TARGET {target!r} is not a URL, a catalog owner/name, a generated module or MODULE:CLASS")


def _module(target: str, env: str | None) -> Live:
    """A generated module's pinned environment, read live where the module's runtime would open its sessions."""
    from orsgen.evaluate.target import members

    found = members(target)
    if env is not None:
        found = [m for m in found if m.name.lower() == env.lower()] or _no_env(target, env, found)
    elif len(found) > 1:
        raise OrsgenError(f"{target} holds {len(found)} environments ({', '.join(m.name for m in found)}): give --env")
    module = found[0].module
    pinned = module.PINNED
    url = pinned.sessions.server(None)  # OPENREWARD_SESSION_URL, else the one the module pins
    origin, snap = source.fetch(url.rstrip("/") if url else pinned.deployment, pinned.env)
    live = Live(target, url, pinned.deployment, pinned.env, snap, origin, module=module)
    if snap.get("tools") != module.SNAPSHOT.get("tools"):
        live.notes.append(f"{target} pins other tools than {live.where} serves (orsgen --check says how): the checks "
                          "use the live ones")
    return live


def _no_env(target: str, env: str, found: list[Any]) -> Any:
    raise OrsgenError(f"{target} has no environment {env!r} (it has {', '.join(m.name for m in found)})")


def serve(spec: str) -> Served:
    """`orsgen serve SPEC` on a free port of 127.0.0.1, run from the current folder; its line read, its URL taken.
    OrsgenError with serve's own line when it refuses."""
    log = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - its stderr, kept while it runs
    command = [sys.executable, "-m", "orsgen.doctor.counting", spec, "--port", "0", "--host", "127.0.0.1"]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=environ)
    assert process.stdout is not None
    line = _first_line(process, SERVE_WAIT)
    found = re.search(r" at (http://\S+) \(Ctrl-C", line or "")
    if found is None:
        if process.poll() is None:
            process.kill()
        process.wait()
        log.seek(0)
        said = _said(log, process)
        log.close()
        raise OrsgenError(f"orsgen serve {spec} did not start: {said}")
    threading.Thread(target=_drain, args=(process.stdout,), daemon=True, name="orsgen-doctor-serve").start()
    return Served(spec, process, found.group(1), log)


def _first_line(process: subprocess.Popen[str], wait: float) -> str | None:
    assert process.stdout is not None
    deadline = time.monotonic() + wait
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=0.2):
                line = process.stdout.readline()
                if line or process.poll() is not None:
                    return line or None
            elif process.poll() is not None:
                return None
    return None


def _said(log: IO[str], process: subprocess.Popen[str]) -> str:
    """serve's own error line (`orsgen: error: ...`), else the last line it wrote, else its exit code."""
    lines = [line.strip() for line in log.read().splitlines() if line.strip()]
    said = next((line.removeprefix("orsgen: error: ") for line in lines if line.startswith("orsgen: error: ")), None)
    return said or (lines[-1][:300] if lines else f"it exited with code {process.returncode}")


def _drain(stream: IO[str]) -> None:
    """What the environment prints on stdout, read and dropped: a full pipe would stop the server."""
    for _ in stream:
        pass
