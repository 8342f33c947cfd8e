"""The page's data: what the page shows of one run (or two), as one JSON value its script reads.

Every figure comes from `orsgen.evaluate.figures` (an eval run's from its summary.json, which those functions wrote;
a training run's from its records through the same functions), so the page says what the report says. The
episodes are the records as the model saw them, each text capped for the page (the records keep everything).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import statistics
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from orsgen.evaluate import figures
from orsgen.evaluate.options import PASS_THRESHOLD
from orsgen.view.inputs import Inputs, Source

CAP = 4_000  # characters of one text shown in the page (head and tail around a marker)
CAP_BIG = 1_000  # ... in a run of more than BIG episodes: the page stays a few tens of MB at most
BIG = 2_000
IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/]+=*")  # shown inline; anything else: text
IMAGE_MAX = 2_000_000  # characters of one inline image; a larger one is described


def page(inputs: Inputs) -> dict[str, Any]:
    """The page's data for `inputs`."""
    if inputs.kind == "training":
        runs = [_training(inputs.sources[0])]
    else:
        runs = [_evaluation(source) for source in inputs.sources]
    data: dict[str, Any] = {"schema": "orsgen.view/1", "kind": inputs.kind, "runs": runs,
                            "made": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    if inputs.kind == "compare":
        data["comparison"] = _comparison(inputs.sources[0], inputs.sources[1])
    names = " vs ".join(r["name"] for r in runs)
    data["title"] = f"orsgen {'eval' if inputs.kind != 'training' else 'training'}: {names}"
    return data


# -- one eval run: its summary.json, and its records ----------------------------------------------------------------


def _evaluation(source: Source) -> dict[str, Any]:
    summary = source.summary or {}
    records = figures.latest(source.records)  # the episodes summary.json counts (a rerun replaces its record)
    bar = summary["pass"]["threshold"]
    about = summary.get("run") or {}
    pins = [{key: env.get(key) for key in ("name", "module", "snapshot", "build") if env.get(key) is not None}
            for env in source.run.get("environments") or []]
    header = {
        "model": about.get("model"), "environments": about.get("environments") or [p["name"] for p in pins],
        "split": about.get("split"), "target": about.get("target"), "endpoint": _no_credentials(about.get("endpoint")),
        "pins": pins, "when": _when(records),
    }
    shown = {key: value for key, value in summary.items() if key != "run"}  # its run: the header, credentials dropped
    return {"name": source.name, "kind": "eval", "header": header, "summary": shown,
            "tasks": _tasks(summary, records), "tools": figures.by_tool(records), "steps": None,
            "episodes": _episodes(records, bar), "skipped": source.skipped,
            "replaced": len(source.records) - len(records)}


def _no_credentials(url: Any) -> Any:
    """A URL as the page may show it: no user, password, query or fragment (an older run.json may hold a key)."""
    if not isinstance(url, str):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _when(records: list[dict[str, Any]]) -> list[str] | None:
    stamps = sorted(str(r["ended_at"]) for r in records if r.get("ended_at"))
    return [stamps[0], stamps[-1]] if stamps else None


def _tasks(summary: dict[str, Any], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """summary.json's tasks, each with its unscored episodes by reason."""
    unscored: dict[tuple[Any, ...], Counter[str]] = defaultdict(Counter)
    for r in records:
        if r.get("unscored_reason"):
            unscored[(r.get("environment"), r.get("split"), r.get("task_index"))][r["unscored_reason"]] += 1
    k = summary["pass"]["k"]
    return [{**task, "pass_at_k": task.get(f"pass_at_{k}"),
             "unscored": dict(unscored.get((task["environment"], task["split"], task["task_index"]), {}))}
            for task in summary["tasks"]]


# -- a training run: its records through the same figures ----------------------------------------------------------


def _training(source: Source) -> dict[str, Any]:
    """A training run: its figures as `figures.summary` counts an eval's (each episode its own: trainers write no
    `rollout`), a pass ("solved") being a reward of at least eval's default bar, 1.0; its steps (the "train" stream's episodes)."""
    numbered = [{**r, "rollout": i} for i, r in enumerate(source.records)]
    summary = figures.summary(numbered, k=1, planned=len(numbered), threshold=PASS_THRESHOLD, tasks=[])
    header = {
        "model": ", ".join(sorted({str(r["model"]) for r in numbered if r.get("model")})) or None,
        "environments": sorted({str(r["environment"]) for r in numbered if r.get("environment")}),
        "split": ", ".join(sorted({str(r["split"]) for r in numbered if r.get("split")})),
        "runs": list(dict.fromkeys(str(r["run"]) for r in numbered if r.get("run"))),
        "ranks": sorted({r["rank"] for r in numbered if isinstance(r.get("rank"), int)}),
        "files": [str(f) for f in source.files], "pins": [], "when": _when(numbered),
    }
    return {"name": source.name, "kind": "training", "header": header, "summary": summary,
            "tasks": _tasks(summary, numbered), "tools": figures.by_tool(numbered), "steps": steps(source.records),
            "episodes": _episodes(numbered, summary["pass"]["threshold"]), "skipped": source.skipped,
            "replaced": 0}


def steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per optimizer step of the training stream (records with a step whose stream is not "eval"): episodes, the
    scored rewards' mean and sample standard deviation, the GRPO groups (a step's episodes of one task: records
    carry no group id, so two groups of one task in one step are one here) and those whose rewards did not spread
    (as the runtime's `orsgen/groups_zero_spread` says it: tasks.spreads), and the unscored share."""
    from orsgen.runtime.tasks import spreads

    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if isinstance(r.get("step"), int) and r.get("stream") != "eval":
            by_step[r["step"]].append(r)
    rows = []
    for step in sorted(by_step):
        mine = by_step[step]
        rewards = [float(r["reward"]) for r in mine if isinstance(r.get("reward"), int | float)
                   and math.isfinite(r["reward"])]  # a NaN reward is counted scored, not averaged
        groups: dict[tuple[Any, ...], list[float | None]] = defaultdict(list)
        for r in mine:
            groups[(r.get("run"), r.get("environment"), r.get("split"), r.get("task_index"))].append(r.get("reward"))
        flat = sum(not spreads(g) for g in groups.values())
        unscored = sum(1 for r in mine if r.get("unscored_reason"))
        rows.append({"step": step, "episodes": len(mine), "scored": len(rewards),
                     "reward_mean": statistics.fmean(rewards) if rewards else None,
                     "reward_std": statistics.stdev(rewards) if len(rewards) > 1 else None,
                     "groups": len(groups), "zero_spread": flat / len(groups),
                     "unscored": unscored / len(mine)})
    return rows


# -- two eval runs -------------------------------------------------------------------------------------------------


def _comparison(a: Source, b: Source) -> dict[str, Any]:
    """figures.compare of the two summaries, changed tasks first (most changed first); the pass bar and k of each,
    and whether they differ (then the pass rates measure different things: flagged)."""
    before, after = a.summary or {}, b.summary or {}
    found = figures.compare(before, after)
    order = sorted(range(len(found["tasks"])), key=lambda i: (not found["tasks"][i]["change"],
                                                              -abs(found["tasks"][i]["change"] or 0), i))
    bars = [{"threshold": s["pass"]["threshold"], "k": s["pass"]["k"]} for s in (before, after)]
    pairs = [[name, was, now] for name, (was, now) in found["figures"].items()]
    return {**found, "tasks": [found["tasks"][i] for i in order], "figures": pairs, "bars": bars,
            "differ": [key for key in ("threshold", "k") if bars[0][key] != bars[1][key]]}


# -- episodes, as the model saw them -------------------------------------------------------------------------------


def _episodes(records: list[dict[str, Any]], bar: float) -> list[dict[str, Any]]:
    cap = CAP_BIG if len(records) > BIG else CAP
    return [_episode(i, r, bar, cap) for i, r in enumerate(records)]


def _episode(number: int, r: dict[str, Any], bar: float, cap: int) -> dict[str, Any]:
    calls, failed = figures.tool_calls(r)
    completion = r.get("completion")
    return {
        "id": number, "environment": r.get("environment"), "split": r.get("split"), "task": r.get("task_index"),
        "rollout": r.get("rollout") if r.get("stream") == "eval" else None, "step": r.get("step"),
        "rank": r.get("rank"), "stream": r.get("stream"), "run": r.get("run"), "model": r.get("model"),
        "reward": r.get("reward"), "scored": r.get("scored"), "unscored": r.get("unscored_reason"),
        "counted": figures.counts(r),
        "passed": figures.passed(r, bar),
        "calls": calls, "failed_calls": failed, "finished": r.get("finished"), "ended": _ended(r),
        "session": r.get("session"), "seconds": r.get("seconds"), "usage": r.get("usage"),
        "ended_at": r.get("ended_at"), "policy_version": r.get("policy_version"),
        "task_spec": None if r.get("task_spec") is None else _cap(_json(r["task_spec"]), cap),
        "prompt": _turns(r.get("prompt"), cap), "completion": _turns(completion, cap),
        "tool_calls": [_call(c, cap) for c in r.get("tool_calls") or []],
    }


def _ended(r: dict[str, Any]) -> str:
    """Why the episode ended, in a few words."""
    if r.get("start_error"):
        return f"did not start: {r['start_error']}"
    if r.get("error"):
        return f"the endpoint failed: {r['error']}"
    reason = r.get("unscored_reason")
    if reason in ("timed_out", "too_many_calls", "stale_prompt", "not_started"):
        return {"timed_out": "the episode's time limit", "too_many_calls": "the episode's tool-call limit",
                "stale_prompt": "its prompt was stale", "not_started": "did not start"}[reason]
    if r.get("finished"):
        return "the environment finished it"
    completion = r.get("completion")
    if not isinstance(completion, list):
        return "its reward was read outside TRL's loop (no turns recorded)"
    if completion and isinstance(completion[-1], dict) and completion[-1].get("role") == "tool":
        return "the turn limit (its last tool results went unread)"
    return "the model answered without a tool call"


def _turns(turns: Any, cap: int) -> list[dict[str, Any]] | None:
    """TRL's turns as the page shows them: role, content (text, or parts: text and images), the assistant's tool
    calls (name, arguments as JSON text), the tool's name."""
    if not isinstance(turns, list):
        return None
    shown = []
    for turn in turns:
        if not isinstance(turn, dict):
            shown.append({"role": "?", "content": _cap(_json(turn), cap)})
            continue
        item: dict[str, Any] = {"role": str(turn.get("role")), "content": _content(turn.get("content"), cap)}
        if item["role"] == "tool":
            item["failed"] = figures.failed(turn)
        if turn.get("name") is not None:
            item["name"] = str(turn["name"])
        calls = turn.get("tool_calls")
        if isinstance(calls, list) and calls:
            item["calls"] = [_asked(c, cap) for c in calls]
        shown.append(item)
    return shown


def _asked(call: Any, cap: int) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return {"name": "?", "arguments": _cap(_json(call), cap)}
    arguments = function.get("arguments")
    return {"name": str(function.get("name")),
            "arguments": _cap(arguments if isinstance(arguments, str) else _json(arguments), cap)}


def _content(content: Any, cap: int) -> Any:
    """A turn's or a result's content: a text, or a list of parts ({"text"} or {"image"}: an inline data URI when the
    record holds one, else the record's description, "[image WxH]")."""
    if content is None:
        return None
    if isinstance(content, str):
        return _cap(content, cap)
    if not isinstance(content, list):
        return _cap(_json(content), cap)
    parts: list[dict[str, str]] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image":
            image = part.get("image")
            if isinstance(image, str) and len(image) <= IMAGE_MAX and IMAGE.fullmatch(image):
                parts.append({"image": image})
            else:
                parts.append({"text": image if isinstance(image, str) and not image.startswith("data:")
                              else "[an image]"})
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append({"text": _cap(part["text"], cap)})
        else:
            parts.append({"text": _cap(_json(part), cap)})
    return parts


def _call(call: dict[str, Any], cap: int) -> dict[str, Any]:
    keep = ("name", "seconds", "reward", "finished", "cut", "truncated", "truncated_unit", "images_left_out",
            "timed_out")
    shown = {key: call.get(key) for key in keep}
    shown["arguments"] = _cap(_json(call.get("arguments")), cap)
    shown["result"] = _content(call.get("result"), cap)
    shown["error"] = None if call.get("error") is None else _cap(str(call["error"]), cap)
    return shown


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


def _cap(text: str, cap: int) -> str:
    """`text` within `cap` characters: its head and tail around a line saying how many were left out."""
    if len(text) <= cap:
        return text
    head, tail = cap - cap // 3, cap // 3
    return (f"{text[:head]}\n[orsgen view: {len(text) - head - tail:,} of {len(text):,} characters not shown here; "
            f"the record keeps them]\n{text[len(text) - tail:]}")
