"""`orsgen view` as a user runs it (a subprocess), and synthetic runs for its size test: an `orsgen eval` folder of N
episodes whose records follow the trajectory schema (orsgen.trajectory/1, every field) and whose summary.json is what
`orsgen eval` writes of them (`figures.summary`), with the texts a real run has: prompts, tool calls, results (a few
long ones cut by the record's cap), failed calls, unscored episodes, images described."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from orsgen.evaluate import figures
from orsgen.runtime import jsontext
from orsgen.runtime.trajectories import cut

from tests.harness.evaluation import environ


def orsgen_view(*args: str, cwd: Path, env: dict[str, str] | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orsgen", "view", *args], check=False, capture_output=True,
                          text=True, cwd=cwd, env=environ(env), timeout=timeout)


def record(i: int, task: int, rollout: int, rng: random.Random, *, environment: str = "synthetic",
           step: int | None = None, stream: str | None = "eval", run: str = "synthetic") -> dict[str, Any]:
    """One episode's record: task `task` asks for a word; the model answers right about half the time."""
    word = f"word{task}"
    not_started = task % 97 == 96
    right = rng.random() < 0.5
    refused = rng.random() < 0.1
    long = rng.random() < 0.02
    result = (f"{word}\n" + "line of tool output\n" * 2_000) if long else ("right" if right else "wrong")
    shown, dropped = cut(result, 20_000)
    completion: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    if not not_started:
        if refused:
            completion += [{"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "answer", "arguments": {"txt": word}}}]},
                {"role": "tool", "name": "answer", "content": "{'error': \"answer() got an unexpected keyword "
                 "argument 'txt'\"}"}]
        answer = word if right else "nope"
        completion += [{"role": "assistant", "content": "Let me answer.", "tool_calls": [
            {"type": "function", "function": {"name": "answer", "arguments": {"text": answer}}}]},
            {"role": "tool", "name": "answer", "content": shown},
            {"role": "assistant", "content": "done"}]
        calls.append({"name": "answer", "arguments": {"text": answer}, "result": shown, "error": None,
                      "seconds": round(0.01 + rng.random() / 10, 6), "reward": 1.0 if right else 0.0,
                      "finished": True, "cut": dropped, "truncated": 0, "truncated_unit": None,
                      "images_left_out": 0, "timed_out": False})
        if rng.random() < 0.05:
            calls.insert(0, {"name": "look", "arguments": {}, "result": [{"type": "text", "text": "a picture"},
                                                                      {"type": "image", "image": "[image 64x48]"}],
                             "error": None, "seconds": 0.2, "reward": None, "finished": False, "cut": 0,
                             "truncated": 0, "truncated_unit": None, "images_left_out": 1, "timed_out": False})
    seconds = sum(c["seconds"] for c in calls)
    return {
        "schema": "orsgen.trajectory/1", "run": run, "step": step, "policy_version": None, "rank": 0,
        "stream": stream, "environment": environment, "adapter": "Synthetic", "split": "train", "task_index": task,
        "task_spec": {"n": task, "word": word}, "session": None if not_started else f"session-{i}",
        "rollout": rollout if stream == "eval" else None, "model": "scripted",
        "prompt": [{"role": "system", "content": "You answer with tools."},
                   {"role": "user", "content": f"Task {task}: answer with the word {word}"}],
        "completion": completion, "tool_calls": calls,
        "reward": None if not_started else (1.0 if right else 0.0), "scored": not not_started,
        "unscored_reason": "not_started" if not_started else None, "finished": not not_started,
        "start_error": "this task never starts" if not_started else None, "error": None,
        "usage": None if not_started else {"prompt_tokens": 40, "completion_tokens": 12},
        "seconds": {"reset": 0.05, "tools": round(seconds, 6), "model": 0.3, "episode": round(0.4 + seconds, 6)},
        "ended_at": f"2026-12-03T10:{(i // 60) % 60:02d}:{i % 60:02d}.000Z",
    }


def eval_folder(folder: Path, episodes: int, k: int = 4, seed: int = 0) -> list[dict[str, Any]]:
    """An `orsgen eval` folder of `episodes` episodes (tasks x k, rollout by rollout, as eval plans them): records,
    summary.json and run.json as the command writes them. Its records."""
    rng = random.Random(seed)
    tasks = episodes // k
    records = [record(i, i % tasks, i // tasks, rng) for i in range(tasks * k)]
    write_folder(folder, records, k=k, tasks=[("synthetic", "train", t) for t in range(tasks)])
    return records


def write_folder(folder: Path, records: list[dict[str, Any]], *, k: int, tasks: list[tuple[str, str, int]],
                 threshold: float = 1.0, model: str = "scripted") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trajectories.jsonl").write_text("".join(jsontext.dumps(r) + "\n" for r in records), encoding="utf-8")
    summary = figures.summary(records, k=k, planned=len(tasks) * k, threshold=threshold, tasks=tasks)
    summary["run"] = {"model": model, "endpoint": "http://127.0.0.1:9/v1", "target": "synthetic.py",
                      "split": "train", "environments": sorted({t[0] for t in tasks}), "folder": str(folder)}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    run = {"run": {"target": "synthetic.py", "model": model, "rollouts": k, "pass_threshold": threshold},
           "endpoint": "http://127.0.0.1:9/v1",
           "environments": [{"name": name, "module": "synthetic", "snapshot": "0" * 64}
                            for name in sorted({t[0] for t in tasks})]}
    (folder / "run.json").write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
