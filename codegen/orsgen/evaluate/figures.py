"""What a run measured, from its trajectory records alone (so a resumed run and `--compare` read the same figures):
mean reward, pass@1 and pass@k, why episodes went unscored, tools, latency, tokens, and each task's pass rate.

What counts: an episode the environment could not start, whose live prompt was stale, or that the endpoint failed
says nothing of the model, so it is left out of the pass rates (and counted under its reason). Every other episode
counts, and passes when its reward is at least the run's threshold (recorded in run.json when the run starts, never
made from the rewards seen): one no tool scored (`no_tool_scored`) is a failure, never a pass.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

SCHEMA = "orsgen.eval/1"
NOT_THE_MODEL = ("not_started", "stale_prompt", "endpoint_error")  # reasons an episode is left out of pass rates


def latest(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per episode (environment, split, task, rollout): the last written (a resumed run re-runs those
    the endpoint failed)."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        found[(record.get("environment"), record.get("split"), record.get("task_index"), record.get("rollout"))] = record
    return list(found.values())


def counts(record: dict[str, Any]) -> bool:
    return record.get("unscored_reason") not in NOT_THE_MODEL


AGAIN = {"endpoint_error": "the endpoint had failed", "not_started": "that had not started"}  # --resume runs them


def again(record: dict[str, Any]) -> str | None:
    """Why --resume runs an episode again, from its latest record (a key of AGAIN); None when it is final."""
    if record.get("error"):
        return "endpoint_error"
    return "not_started" if record.get("unscored_reason") == "not_started" else None


def settled(record: dict[str, Any]) -> bool:
    """An episode `--resume` keeps ("done", "saved"): one it runs `again` is not."""
    return again(record) is None


def pass_at(n: int, c: int, k: int) -> float | None:
    """The unbiased estimator of pass@k from n episodes of which c passed (Chen et al. 2021); None when n < k."""
    if n < k:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def summary(records: list[dict[str, Any]], *, k: int, planned: int, threshold: float,
            tasks: list[tuple[str, str, int]]) -> dict[str, Any]:
    """The run's figures (summary.json) at the run's `threshold`; `tasks` are the planned tasks, in order, so
    unmeasured ones show too."""
    records = latest(records)
    counted = [r for r in records if counts(r)]
    by_task: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_task[(r["environment"], r["split"], r["task_index"])].append(r)
    rows: list[dict[str, Any]] = []
    for key in list(dict.fromkeys([*tasks, *sorted(by_task)])):
        mine = by_task.get(key, [])
        good = [r for r in mine if counts(r)]
        passes = sum(1 for r in good if passed(r, threshold))
        rewards = [r["reward"] for r in good if r.get("reward") is not None]
        rows.append({"environment": key[0], "split": key[1], "task_index": key[2], "episodes": len(mine),
                     "counted": len(good), "passes": passes, "pass_rate": passes / len(good) if good else None,
                     "mean_reward": statistics.fmean(rewards) if rewards else None,
                     f"pass_at_{k}": pass_at(len(good), passes, k)})
    measured = [t for t in rows if t["counted"]]
    at_k = [v for t in measured if (v := pass_at(t["counted"], t["passes"], k)) is not None]
    rewards = [r["reward"] for r in counted if r.get("reward") is not None]
    calls = [len(_tool_turns(r)) for r in counted]
    failures = [sum(1 for t in _tool_turns(r) if _failed(t)) for r in counted]
    episode_seconds = [r["seconds"]["episode"] for r in records if r.get("seconds", {}).get("episode") is not None]
    replies = sum(sum(1 for t in r.get("completion") or [] if t.get("role") == "assistant") for r in records)
    model_seconds = sum(r["seconds"].get("model") or 0.0 for r in records if r.get("seconds"))
    tool_seconds = [c.get("seconds") or 0.0 for r in records for c in r.get("tool_calls") or []]
    waited = [r["seconds"].get("waited") or 0.0 for r in records if r.get("seconds")]  # --max-sessions
    usage = [r["usage"] for r in records if r.get("usage")]
    return {
        "schema": SCHEMA,
        "episodes": {"planned": planned, "done": sum(1 for r in records if settled(r)), "counted": len(counted)},
        # "given": the bar the run recorded (null in summaries from before it was: theirs was the highest reward seen)
        "pass": {"threshold": threshold, "given": threshold, "k": k,
                 "at_1": statistics.fmean(t["passes"] / t["counted"] for t in measured) if measured else None,
                 "at_k": statistics.fmean(at_k) if at_k else None, "tasks_at_k": len(at_k),
                 "rule": f"reward >= {threshold:g}; episodes {', '.join(NOT_THE_MODEL)} left out"},
        "reward": {"mean": statistics.fmean(rewards) if rewards else None, "scored": len(rewards),
                   "passed": sum(1 for r in counted if passed(r, threshold))},
        "unscored": dict(sorted(Counter(r["unscored_reason"] for r in records if r.get("unscored_reason")).items())),
        "tools": {"calls_per_episode": statistics.fmean(calls) if calls else None,
                  "failures_per_episode": statistics.fmean(failures) if failures else None,
                  "failure_rate": sum(failures) / sum(calls) if sum(calls) else None},
        "latency": {"episode_p50": _quantile(episode_seconds, 0.5), "episode_p95": _quantile(episode_seconds, 0.95),
                    "model_reply_mean": model_seconds / replies if replies else None,
                    "tool_call_mean": statistics.fmean(tool_seconds) if tool_seconds else None,
                    # seconds episodes' starts waited for a place in the sessions budget, in all, and how many did
                    "session_wait_total": sum(waited), "episodes_waited": sum(1 for w in waited if w > 0)},
        "tokens": None if not usage else {
            "prompt": sum(u.get("prompt_tokens", 0) for u in usage),
            "completion": sum(u.get("completion_tokens", 0) for u in usage),
            "completion_per_episode": statistics.fmean(u.get("completion_tokens", 0) for u in usage)},
        "tasks": rows,
    }


def _tool_turns(record: dict[str, Any]) -> list[Any]:
    """The tool calls the model made, as TRL counts them (`tools/call_frequency`): its tool turns, a call that never
    reached the environment (an unknown tool, arguments the method refuses) included; the calls the runtime made
    when the record holds no turns."""
    turns = record.get("completion")
    if isinstance(turns, list):
        return [t for t in turns if isinstance(t, dict) and t.get("role") == "tool"]
    return list(record.get("tool_calls") or [])


def _failed(turn: dict[str, Any]) -> bool:
    """A failed call, as TRL counts it (`tools/failure_frequency`): its tool turn is `{'error': ...}`."""
    if "role" not in turn:
        return bool(turn.get("error"))
    content = turn.get("content")
    return isinstance(content, str) and content.startswith("{'error': ")


def passed(record: dict[str, Any], bar: float) -> bool:
    """Whether an episode passed, as `summary` counts it: counted, its reward at least `bar`."""
    return counts(record) and isinstance(record.get("reward"), int | float) and record["reward"] >= bar


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def refusal(before: dict[str, Any], after: dict[str, Any], names: tuple[str, str]) -> str | None:
    """Why two runs' pass rates cannot be compared (they pass at different bars), or None."""
    bars = (before["pass"]["threshold"], after["pass"]["threshold"])
    if bars[0] == bars[1]:
        return None

    def at(bar: float, summary: dict[str, Any]) -> str:
        moved = summary["pass"].get("given", bar) is None  # a summary from before the bar was recorded
        return f"at reward >= {bar:g}" + (" (the highest reward it saw: orsgen eval --resume recomputes it at the "
                                          "run's bar)" if moved else "")

    return (f"{names[0]} passes {at(bars[0], before)} and {names[1]} {at(bars[1], after)}: their pass rates are not "
            "comparable (measure both at one --pass-threshold)")


def tool_calls(record: dict[str, Any]) -> tuple[int, int]:
    """An episode's tool calls and failed calls, as TRL counts them (`summary`'s per episode)."""
    turns = _tool_turns(record)
    return len(turns), sum(1 for t in turns if _failed(t))


def failed(turn: dict[str, Any]) -> bool:
    """Whether a tool turn (or a call the runtime recorded) failed, as TRL counts it."""
    return _failed(turn)


def by_tool(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool's figures, as `summary` counts them: calls and failed calls (TRL's tool turns) over the counted
    episodes; over every episode, the calls that reached the environment (`tool_calls`): their seconds (p50, p95),
    the characters the model was shown (before a record's own cap), those a budget cut or left images out of, and
    those that timed out. Most calls first."""
    records = latest(records)
    tools: dict[str, dict[str, Any]] = defaultdict(lambda: {"calls": 0, "failed": 0, "reached": 0, "seconds": [],
                                                             "chars": [], "budget_cut": 0, "timed_out": 0})
    for r in records:
        if counts(r):
            for turn in _tool_turns(r):
                tool = tools[str(turn.get("name"))]
                tool["calls"] += 1
                tool["failed"] += _failed(turn)
        for call in r.get("tool_calls") or []:
            tool = tools[str(call.get("name"))]
            tool["reached"] += 1
            tool["seconds"].append(call.get("seconds") or 0.0)
            tool["chars"].append(_shown(call.get("result"), call.get("cut") or 0))
            tool["budget_cut"] += bool(call.get("truncated") or call.get("images_left_out"))
            tool["timed_out"] += bool(call.get("timed_out"))
    rows = []
    for name, t in tools.items():
        seconds, chars = t.pop("seconds"), t.pop("chars")
        rows.append({"name": name, **t, "failure_rate": t["failed"] / t["calls"] if t["calls"] else None,
                     "seconds_p50": _quantile(seconds, 0.5), "seconds_p95": _quantile(seconds, 0.95),
                     "chars_mean": statistics.fmean(chars) if chars else None, "chars_max": max(chars, default=None)})
    return sorted(rows, key=lambda t: (-t["calls"], -t["reached"], t["name"]))


_CUT = re.compile(r"\n\[orsgen: (\d+) of (\d+) characters cut from this tool result\]\n")


def _shown(result: Any, cut: int) -> int:
    """The characters of a tool result the model was shown: its text (content parts: their texts), before the
    record's cap (whose marker says how long it was)."""
    if isinstance(result, str):
        texts = [result]
    else:
        parts = result if isinstance(result, list) else []
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    total = 0
    for text in texts:
        found = _CUT.search(text) if cut else None
        total += int(found.group(2)) if found else len(text)
    return total


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Two runs' summaries, measured at one bar, task by task: each task's pass rate before and after, and which
    changed; `k` is each run's own."""
    def index(summary: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {(t["environment"], t["split"], t["task_index"]): t for t in summary["tasks"]}

    a, b = index(before), index(after)
    rows = []
    for key in list(dict.fromkeys([*a, *b])):
        was, now = (a.get(key) or {}).get("pass_rate"), (b.get(key) or {}).get("pass_rate")
        change = None if was is None or now is None else now - was
        rows.append({"environment": key[0], "split": key[1], "task_index": key[2], "before": was, "after": now,
                     "change": change})
    changed = [r for r in rows if r["change"]]
    k = (before["pass"]["k"], after["pass"]["k"])
    return {"tasks": rows, "improved": sum(1 for r in changed if r["change"] > 0),
            "regressed": sum(1 for r in changed if r["change"] < 0),
            "unchanged": sum(1 for r in rows if r["change"] == 0),
            "only_one": sum(1 for r in rows if (r["before"] is None) != (r["after"] is None)),
            "neither": sum(1 for r in rows if r["before"] is None and r["after"] is None),
            "counted": (before["episodes"]["counted"], after["episodes"]["counted"]),
            "unscored": (before["unscored"], after["unscored"]), "k": k,
            "figures": {name: (before["pass"].get(key) if name != "mean reward" else before["reward"]["mean"],
                               after["pass"].get(key) if name != "mean reward" else after["reward"]["mean"])
                        for name, key in (("mean reward", None), ("pass@1", "at_1"),
                                          (f"pass@{k[0]}" if k[0] == k[1] else "pass@k", "at_k"))}}
