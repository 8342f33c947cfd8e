"""Stage 1: get the tool list (and splits) of one environment, from a server, the catalog or a file."""

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orsgen import normalize, snapshot, wire
from orsgen.errors import OrsgenError

CATALOG = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


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


@dataclass(frozen=True)
class Probe:
    """What generation reads beyond `/tools`: the tasks whose session tool lists (`/task_tools`) are read ("0,1,5",
    "0-9", "all"), whether their tools then go to every task, and the secrets opening a session needs."""

    task_tools_from: str | None = None
    to_all: bool = False  # TRL's task_tools_discovery_index: the probed tasks' tools are every task's
    secrets: Mapping[str, str] = field(default_factory=dict)  # name -> value, sent only in X-Secrets
    require_task_tools: bool = True  # an option that finds nothing is refused (one environment of several: not)


def fetch(target: str, env: str | None = None, probe: Probe | None = None) -> tuple[Source, dict[str, Any]]:
    """(source, snapshot) for a TARGET: a URL, `owner/name`, or a JSON file."""
    probe = probe or Probe()
    if re.match(r"https?://", target):
        return _from_url(target.rstrip("/"), env, probe)
    path = Path(target)
    if path.suffix == ".json" or path.exists():
        if probe.task_tools_from:
            raise OrsgenError("--task-tools-from needs a server or catalog TARGET (task tools need live sessions)")
        return _from_file(target, path, env)
    if CATALOG.fullmatch(target):
        return _from_catalog(target, env, probe)
    if re.fullmatch(r"[\w.-]+:\d+(/\S*)?", target):  # 127.0.0.1:8000, localhost:8000/
        raise OrsgenError(f"TARGET {target!r} has no scheme: use http://{target}")
    raise OrsgenError(f"TARGET {target!r} is not a URL, an owner/name catalog name or an existing JSON file")


def _empty_file(target: str) -> str:
    """`curl URL/tools > tools.json` saves the server's 308 redirect, which has no body."""
    return (f"{target} is empty (a `curl URL/tools` saves the server's redirect, which has no body): the endpoint is "
            "URL/{env}/tools (URL/list_environments names the environments), or use `curl -L URL/tools`")


def _from_file(target: str, path: Path, env: str | None) -> tuple[Source, dict[str, Any]]:
    data = read_json(path, target)
    tools, rest = normalize.tool_list(data, target)
    name = env or (rest.get("env") if isinstance(rest.get("env"), str) else None)
    if not name:  # the module pins it: a guess from the file name would send every request to the wrong path
        raise OrsgenError(f"{target} does not name its environment: pass --env NAME (its name on the server)")
    extra: dict[str, Any] = {k: rest[k] for k in ("terminal_tool", "splits", "task_tools") if k in rest}
    extra.update(scoring(rest))
    if "task_tools" in extra and not isinstance(extra["task_tools"], dict):
        raise OrsgenError(f"{target}: 'task_tools' must be an object (the shape of an orsgen snapshot's)")
    split = _default_split(extra.get("splits"))
    source = Source(target=target, url=None, deployment=name, env=env or rest.get("env") or name, name=name, split=split)
    return source, _snap(source.env, tools, extra)


def read_file(path: Path, target: str) -> str:
    """A text file the user named (a tool list, a module), or one line saying why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OrsgenError(f"{target}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OrsgenError(f"{target}: cannot read: {exc}") from None


def read_json(path: Path, target: str) -> Any:
    """A JSON file, any depth: Python's parser gives up (RecursionError) on a few hundred levels of nesting."""
    text = read_file(path, target)
    if not text.strip():
        raise OrsgenError(_empty_file(target))
    return normalize.loads(text, target)


def _from_url(url: str, env: str | None, probe: Probe) -> tuple[Source, dict[str, Any]]:
    api_key = os.environ.get("OPENREWARD_API_KEY", "")
    bare = wire.Server(url, deployment="", env=None, api_key=api_key)
    try:
        envs = bare.request("GET", "/list_environments", deployment=False)
    except wire.HTTPStatusError as exc:
        hint = _env_path_hint(url, exc, api_key)
        if hint is None:
            raise
        raise OrsgenError(f"{exc}: {hint}") from None
    if not isinstance(envs, list) or not envs or not all(isinstance(e, str) for e in envs):
        raise OrsgenError(f"{url}/list_environments did not return a list of environment names")
    chosen = _choose(envs, env, url)
    build = _build(bare)
    source = Source(target=url, url=url, deployment=chosen, env=chosen, name=chosen, split="train", build=build)
    server = wire.Server(url, deployment=chosen, env=chosen, api_key=api_key, secrets=probe.secrets)
    return _with_tools(source, server, probe)


def _env_path_hint(url: str, exc: wire.HTTPStatusError, api_key: str) -> str | None:
    """A 404 for a URL with a path (`http://host:8010/shop`): an environment's path, where the server's base URL and
    `--env` go; what to type instead, with the environments the base URL serves when it answers. None otherwise."""
    parts = urllib.parse.urlsplit(url)
    name = parts.path.strip("/").rsplit("/", 1)[-1]
    if exc.status != 404 or not name:
        return None
    base = urllib.parse.urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], "", "", ""))
    try:
        envs = wire.Server(base, deployment="", env=None, api_key=api_key).request(
            "GET", "/list_environments", deployment=False, timeout=5.0)
    except OrsgenError:
        envs = None
    served = f" (it serves {', '.join(map(str, envs))})" if isinstance(envs, list) and envs else ""
    return f"give the server's base URL and the environment as --env: orsgen {base} --env {name}{served}"


def _from_catalog(name: str, env: str | None, probe: Probe) -> tuple[Source, dict[str, Any]]:
    api_key = os.environ.get("OPENREWARD_API_KEY", "")
    if not api_key:
        raise OrsgenError(f"{name} is a catalog name: set OPENREWARD_API_KEY (it is used, never stored)")
    # No `--env`: bare paths, the deployment's default environment, as the SDK's `environments.get(name)` (variant
    # None) and the module's runtime then send them; nothing is asked without a session id to choose a path.
    server = wire.Server(wire.platform_sessions(), deployment=name, env=env, api_key=api_key, secrets=probe.secrets,
                         platform=True)
    source = Source(target=name, url=None, deployment=name, env=env, name=name.split("/", 1)[1], split="train",
                    build=_build(server))
    return _with_tools(source, server, probe)


def _with_tools(source: Source, server: wire.Server, probe: Probe) -> tuple[Source, dict[str, Any]]:
    where = source.env or source.deployment
    named = (f"catalog environment {source.target}" + (f" (--env {source.env})" if source.env else "")
             if source.url is None else f"{where} from {source.target}")  # a catalog name is its own target
    try:
        response = server.tools()
        splits = server.splits()
        source = replace(source, split=_default_split(splits))
        tools, rest = normalize.tool_list(response, source.target)
        per_task = _task_tools(server, source.split, probe, tools) if probe.task_tools_from else None
    except wire.Unreachable:  # its line names the server, why and what to check already
        raise
    except OrsgenError as exc:
        raise OrsgenError(f"fetching the tools of {named} failed: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a body that is not what ORS answers
        raise OrsgenError(server.scrub(f"{source.target} does not answer as an ORS server does for {where}: "
                                       f"{type(exc).__name__}: {exc}")[:300]) from None
    if per_task is not None and not per_task["tools"] and not per_task["conflicts"]:
        if probe.require_task_tools:
            raise OrsgenError(f"--task-tools-from {probe.task_tools_from}: no task of {where} advertises tools "
                              "beyond the shared ones; drop the option")
        per_task = None  # one environment of several: it simply has none
    extra: dict[str, Any] = {"splits": splits}
    if rest.get("terminal_tool"):
        extra["terminal_tool"] = rest["terminal_tool"]
    extra.update(scoring(rest))
    if per_task and probe.to_all:  # every task gets them: they join the shared tools, kept apart for the drift check
        per_task["all_tasks"] = True
    if per_task:
        extra["task_tools"] = per_task
    return source, _snap(source.env, tools, extra)


def scoring(rest: dict[str, Any]) -> dict[str, Any]:
    """What the snapshot records of group scoring: nothing for an environment without it (so its module and pin stay
    what they were), else the flag and the message block types its candidates may carry."""
    if rest.get("supports_score_group") is not True:
        return {}
    types = rest.get("message_block_types")
    accepted = sorted({t for t in types if isinstance(t, str)}) if isinstance(types, list) else ["image", "text"]
    return {"supports_score_group": True, "message_block_types": accepted}


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


def _task_tools(server: wire.Server, split: str, probe: Probe, shared: list[dict[str, Any]]) -> dict[str, Any]:
    """Tools that only some tasks advertise: their specs, which tasks list each, and schemas that differ by task;
    with the tasks read, and how many there are (what the others get is said in the module)."""
    count = server.num_tasks(split)
    indices = task_indices(probe.task_tools_from or "", count)
    shared_specs = {t["name"]: t for t in shared}
    specs: dict[str, dict[str, Any]] = {}
    tasks: dict[str, list[int]] = {}
    conflicts: list[str] = []
    for index in indices:
        listed, _ = normalize.tool_list(server.task_tools(split, index), "task_tools")
        for tool in listed:
            name = tool["name"]
            known = shared_specs.get(name) or specs.get(name)
            if known is None:
                specs[name] = tool
            elif snapshot.canonical(known) != snapshot.canonical(tool):
                conflicts.append(f"{name!r} differs on task {index} from {'the shared tool' if name in shared_specs else 'its first listing'}; the first is kept")
            if name not in shared_specs:
                tasks.setdefault(name, []).append(index)
    found: dict[str, Any] = {"split": split, "tools": sorted(specs.values(), key=lambda t: t["name"]),
                             "tasks": tasks, "conflicts": conflicts}
    if len(indices) < count:
        found.update(read=indices, num_tasks=count)
    return found


def tasks(source: Source, splits: list[str]) -> dict[str, Any]:
    """Every task spec of the splits, for `--pin-tasks` (one task-range request per split)."""
    api_key = os.environ.get("OPENREWARD_API_KEY", "")
    server = wire.Server(source.url or wire.platform_sessions(), source.deployment, source.env, api_key,
                         platform=source.url is None)
    try:
        return {"format": 1, "env": source.env, "splits": {s: server.task_range(s) for s in splits}}
    except (OrsgenError, KeyError, TypeError) as exc:
        raise OrsgenError(f"fetching the tasks of {source.env or source.deployment} failed: {exc}") from None


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


def _build(server: wire.Server) -> str | None:
    """The server's build id, where it reports one (`OPENREWARD_BUILD_SHA` on the server): None otherwise. A server
    that cannot be reached is not one that reports none: that fails here, once."""
    try:
        found = server.version()
    except wire.Unreachable:
        raise
    except OrsgenError:
        return None
    sha = found.get("build_sha") if isinstance(found, dict) else None
    return sha if isinstance(sha, str) and sha else None
