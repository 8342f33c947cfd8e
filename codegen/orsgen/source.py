"""Stage 1: get the tool list (and splits) of one environment, from a server, the catalog or a file."""

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orsgen import normalize, snapshot
from orsgen.errors import OrsgenError
from orsgen.runtime.client import describe

CATALOG = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
TIMEOUT = 10.0


@dataclass(frozen=True)
class Source:
    """Where an adapter's environment lives, as pinned in the generated module."""

    target: str  # what the user typed
    url: str | None  # session server for self-hosted targets; None: the SDK's (OPENREWARD_SESSION_URL)
    deployment: str  # X-Deployment: the catalog name, or the env name
    env: str | None  # the env's path segment on the server (the SDK `variant`)
    name: str  # used for the class name
    split: str  # default split
    build: str | None = None  # the server's build (GET /version `build_sha`), on servers that report one


def fetch(target: str, env: str | None = None, task_tools_from: str | None = None,
          require_task_tools: bool = True) -> tuple[Source, dict[str, Any]]:
    """(source, snapshot) for a TARGET: a URL, `owner/name`, or a JSON file. `task_tools_from` names the tasks
    ("0,1,5", "0-9", "all") whose session tool lists (`/task_tools`) are read for task-specific tools."""
    if re.match(r"https?://", target):
        return _from_url(target.rstrip("/"), env, task_tools_from, require_task_tools)
    path = Path(target)
    if path.suffix == ".json" or path.exists():
        if task_tools_from:
            raise OrsgenError("--task-tools-from needs a server or catalog TARGET (task tools need live sessions)")
        return _from_file(target, path, env)
    if CATALOG.fullmatch(target):
        return _from_catalog(target, env, task_tools_from, require_task_tools)
    if re.fullmatch(r"[\w.-]+:\d+(/\S*)?", target):  # 127.0.0.1:8000, localhost:8000/
        raise OrsgenError(f"TARGET {target!r} has no scheme: use http://{target}")
    raise OrsgenError(f"TARGET {target!r} is not a URL, an owner/name catalog name or an existing JSON file")


def _empty_file(target: str) -> str:
    """`curl URL/tools > tools.json` saves the server's 308 redirect, which has no body."""
    return (f"{target} is empty (a `curl URL/tools` saves the server's redirect, which has no body): the endpoint is "
            "URL/{env}/tools (URL/list_environments names the environments), or use `curl -L URL/tools`")


def _from_file(target: str, path: Path, env: str | None) -> tuple[Source, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OrsgenError(f"{target}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OrsgenError(f"{target}: cannot read: {exc}") from None
    if not text.strip():
        raise OrsgenError(_empty_file(target))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OrsgenError(f"{target}: not valid JSON: {exc}") from None
    tools, rest = normalize.tool_list(data, target)
    name = env or (rest.get("env") if isinstance(rest.get("env"), str) else None)
    if not name:  # the module pins it: a guess from the file name would send every request to the wrong path
        raise OrsgenError(f"{target} does not name its environment: pass --env NAME (its name on the server)")
    extra: dict[str, Any] = {k: rest[k] for k in ("terminal_tool", "splits", "task_tools") if k in rest}
    if "task_tools" in extra and not isinstance(extra["task_tools"], dict):
        raise OrsgenError(f"{target}: 'task_tools' must be an object (the shape of an orsgen snapshot's)")
    split = _default_split(extra.get("splits"))
    source = Source(target=target, url=None, deployment=name, env=env or rest.get("env") or name, name=name, split=split)
    return source, _snap(source.env, tools, extra)


def _from_url(url: str, env: str | None, task_tools_from: str | None,
              require_task_tools: bool = True) -> tuple[Source, dict[str, Any]]:
    envs = _get_json(f"{url}/list_environments", {})
    if not isinstance(envs, list) or not envs or not all(isinstance(e, str) for e in envs):
        raise OrsgenError(f"{url}/list_environments did not return a list of environment names")
    chosen = _choose(envs, env, url)
    build = _build(url, {})
    source = Source(target=url, url=url, deployment=chosen, env=chosen, name=chosen, split="train", build=build)
    return _with_tools(source, os.environ.get("OPENREWARD_API_KEY", ""), task_tools_from, require_task_tools)


def _from_catalog(name: str, env: str | None, task_tools_from: str | None,
                  require_task_tools: bool = True) -> tuple[Source, dict[str, Any]]:
    api_key = os.environ.get("OPENREWARD_API_KEY", "")
    if not api_key:
        raise OrsgenError(f"{name} is a catalog name: set OPENREWARD_API_KEY (it is used, never stored)")
    from openreward import OpenReward

    if env is None:
        session_url = OpenReward(api_key=api_key).session_base_url.rstrip("/")
        headers = {"X-Deployment": name, "X-API-Key": api_key}
        try:
            envs = _get_json(f"{session_url}/list_environments", headers)
            env = envs[0] if isinstance(envs, list) and envs and isinstance(envs[0], str) else None
        except OrsgenError:
            env = None  # the platform routes by deployment; the SDK then uses bare paths
    build = _build(OpenReward(api_key=api_key).session_base_url.rstrip("/"), {"X-Deployment": name, "X-API-Key": api_key})
    source = Source(target=name, url=None, deployment=name, env=env, name=name.split("/", 1)[1], split="train",
                    build=build)
    return _with_tools(source, api_key, task_tools_from, require_task_tools)


def _with_tools(source: Source, api_key: str, task_tools_from: str | None,
                require_task_tools: bool = True) -> tuple[Source, dict[str, Any]]:
    from openreward import OpenReward

    client = OpenReward(api_key=api_key)
    try:
        handle = client.environments.get(source.deployment, variant=source.env, base_url=source.url)
        # The raw /tools body: the SDK's ToolSpec list drops terminal_tool, its provider formats are lossy.
        response = handle._run(handle._async._tools_response())
        splits = handle.list_splits()
        source = replace(source, split=_default_split(splits))
        tools, rest = normalize.tool_list(response, source.target)
        per_task = _task_tools(handle, source.split, task_tools_from, tools) if task_tools_from else None
        if per_task is not None and not per_task["tools"] and not per_task["conflicts"]:
            if require_task_tools:
                raise OrsgenError(f"--task-tools-from {task_tools_from}: no task of {source.env or source.deployment} "
                                  "advertises tools beyond the shared ones; drop the option")
            per_task = None  # one environment of several: it simply has none
    except OrsgenError:
        raise
    except Exception as exc:  # noqa: BLE001 - the SDK raises many transport types; the user needs one line
        raise OrsgenError(f"fetching tools of {source.env or source.deployment} from {source.target} failed: "
                          f"{_safe(exc)}") from None
    finally:
        client.environments.close()
    extra: dict[str, Any] = {"splits": splits}
    if rest.get("terminal_tool"):
        extra["terminal_tool"] = rest["terminal_tool"]
    if per_task:
        extra["task_tools"] = per_task
    return source, _snap(source.env, tools, extra)


def task_indices(spec: str, count: int) -> list[int]:
    """ "all", "0-9", "0,1,5" or a mix ("0-3,7") -> sorted task indices below `count`."""
    if spec.strip() == "all":
        return list(range(count))
    found: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise OrsgenError(f"--task-tools-from {spec!r}: use indices, ranges like 0-9, or 'all'")
        found.update(range(int(lo), int(hi or lo) + 1))
    outside = [i for i in found if i >= count]
    if outside:
        raise OrsgenError(f"--task-tools-from: task {min(outside)} does not exist (the split has {count} tasks)")
    return sorted(found)


def _task_tools(handle: Any, split: str, spec: str, shared: list[dict[str, Any]]) -> dict[str, Any]:
    """Tools that only some tasks advertise: their specs, which tasks list each, and schemas that differ by task."""
    indices = task_indices(spec, handle.num_tasks(split))
    shared_specs = {t["name"]: t for t in shared}
    specs: dict[str, dict[str, Any]] = {}
    tasks: dict[str, list[int]] = {}
    conflicts: list[str] = []
    for index in indices:
        with handle.session(split=split, index=index) as session:
            listed, _ = normalize.tool_list({"tools": [vars(t) for t in session.list_tools()]}, "task_tools")
        for tool in listed:
            name = tool["name"]
            known = shared_specs.get(name) or specs.get(name)
            if known is None:
                specs[name] = tool
            elif snapshot.canonical(known) != snapshot.canonical(tool):
                conflicts.append(f"{name!r} differs on task {index} from {'the shared tool' if name in shared_specs else 'its first listing'}; the first is kept")
            if name not in shared_specs:
                tasks.setdefault(name, []).append(index)
    return {"split": split, "tools": sorted(specs.values(), key=lambda t: t["name"]), "tasks": tasks,
            "conflicts": conflicts}


def tasks(source: Source, splits: list[str]) -> dict[str, Any]:
    """Every task spec of the splits, for `--pin-tasks` (one task-range request per split)."""
    from openreward import OpenReward

    client = OpenReward(api_key=os.environ.get("OPENREWARD_API_KEY", ""))
    try:
        handle = client.environments.get(source.deployment, variant=source.env, base_url=source.url)
        return {"format": 1, "env": source.env, "splits": {s: [t.task_spec for t in handle.get_task_range(s)] for s in splits}}
    except Exception as exc:  # noqa: BLE001 - the SDK raises many transport types; the user needs one line
        raise OrsgenError(f"fetching the tasks of {source.env or source.deployment} failed: {_safe(exc)}") from None
    finally:
        client.environments.close()


def _snap(env: str | None, tools: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    snap = snapshot.make(env, tools, extra)
    try:
        snapshot.dumps(snap)
    except ValueError as exc:
        raise OrsgenError(str(exc)) from None
    return snap


def _choose(envs: list[str], env: str | None, url: str) -> str:
    if env is None:
        return envs[0]
    for name in envs:
        if name.lower() == env.lower():
            return name
    raise OrsgenError(f"unknown environment {env!r} at {url} (it serves: {', '.join(envs)})")


def _default_split(splits: Any) -> str:
    names = [s if isinstance(s, str) else s.get("name") for s in splits or [] if isinstance(s, (str, dict))]
    return "train" if "train" in names or not names else str(names[0])


def _build(server: str, headers: dict[str, str]) -> str | None:
    """The server's build id, where it reports one (`OPENREWARD_BUILD_SHA` on the server): None otherwise."""
    try:
        found = _get_json(f"{server}/version", headers)
    except OrsgenError:
        return None
    sha = found.get("build_sha") if isinstance(found, dict) else None
    return sha if isinstance(sha, str) and sha else None


def _get_json(url: str, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise OrsgenError(f"{url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise OrsgenError(_unreachable(url.rsplit("/", 1)[0], getattr(exc, "reason", exc))) from None
    except json.JSONDecodeError:
        raise OrsgenError(f"{url} did not answer with JSON") from None


def _unreachable(server: str, reason: object) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return f"cannot reach ORS server at {server}: connection refused: is the server running, on this port?"
    return f"cannot reach ORS server at {server}: {reason}"


def _safe(exc: Exception) -> str:
    """An exception as one line (a retry chain: its last error, once), with any API key removed."""
    text = describe(exc)
    key = os.environ.get("OPENREWARD_API_KEY")
    return text.replace(key, "***") if key else text
