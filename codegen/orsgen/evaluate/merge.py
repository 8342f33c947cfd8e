"""`orsgen eval --merge DIR... --out DIR`: the N shards of one run (`--shard I/N`, each run and resumed on its own,
on any machine) as that run: its records (each naming the merged run), its run.json without a shard, and its figures
made from the whole run's tasks, which every shard saved. Needs neither the environment nor the endpoint.

Shards of different runs are refused in one line: another module pin, model, sampling, k, bar or task list, another
number of shards, a shard given twice or missing."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orsgen.errors import OrsgenError
from orsgen.evaluate import options
from orsgen.evaluate.options import Invocation, Run

FLAGS = {"model": "--model", "split": "--split", "tasks": "--tasks", "num_tasks": "-n", "rollouts": "-k",
         "max_turns": "--max-turns", "pass_threshold": "--pass-threshold", "rewards": "--reward",
         "unscored_reward": "--unscored-reward"}  # what a differing Run field is called on the command line


@dataclass(frozen=True)
class Part:
    """One shard's folder as its run.json describes it."""

    folder: Path
    run: Run
    saved: dict[str, Any]  # the whole run.json

    @property
    def pins(self) -> list[tuple[str, str]]:
        return [(str(e.get("name")), str(e.get("snapshot"))) for e in self.saved.get("environments", [])]


def merge(invocation: Invocation) -> int:
    from orsgen import evaluate
    from orsgen.evaluate import figures
    from orsgen.runtime import jsontext
    from orsgen.write import atomic

    assert invocation.merge is not None and invocation.out is not None
    parts = [_part(folder) for folder in invocation.merge]
    first = parts[0]
    for other in parts[1:]:
        why = _foreign(first, other)
        if why is not None:
            raise OrsgenError(f"--merge: {other.folder} is a shard of another run than {first.folder}: {why}")
    assert first.run.shard is not None
    count = first.run.shard.count
    given: dict[int, Path] = {}
    for part in parts:
        assert part.run.shard is not None
        if part.run.shard.index in given:
            raise OrsgenError(f"--merge: shard {part.run.shard} is given twice ({given[part.run.shard.index]}, "
                              f"{part.folder})")
        given[part.run.shard.index] = part.folder
    missing = [f"{i}/{count}" for i in range(count) if i not in given]
    if missing:
        raise OrsgenError(f"--merge: the run has {count} shards and {', '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not given: give every shard's folder")
    out = invocation.out
    evaluate.fresh(out, f"--out {out}")
    records = []
    for part in parts:
        for record in evaluate.records_of(part.folder):
            records.append({**record, "run": out.name})  # as the one run in `out` names its records
    run = replace(first.run, shard=None)
    saved = {**{k: v for k, v in first.saved.items() if k not in ("plan", "run")}, "run": run.saved(),
             "merged": [str(p.folder) for p in parts]}
    out.mkdir(parents=True, exist_ok=True)
    atomic(out / evaluate.RECORDS, "".join(jsontext.dumps(r, default=str) + "\n" for r in records))
    atomic(out / evaluate.RUN, jsontext.dumps(saved, indent=1) + "\n")
    plan = first.saved["plan"]
    names = [name for name, _ in first.pins]
    evaluate.finish(out, run, first.saved.get("endpoint"), names, options.expand(plan["tasks"]),
                    int(plan["episodes"]), records, invocation)
    done = sum(1 for r in figures.latest(records) if figures.settled(r))
    rest = f"; orsgen eval --resume {out} runs the rest" if done < plan["episodes"] else ""
    print(f"orsgen eval: merged {count} shards into {out}: {done} of {plan['episodes']} episodes{rest}",
          file=sys.stderr)
    return 0


def _part(folder: Path) -> Part:
    path = folder / "run.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OrsgenError(f"--merge {folder}: no {path}: not the folder of an orsgen eval run") from None
    except (OSError, ValueError) as exc:
        raise OrsgenError(f"--merge {folder}: cannot read {path}: {exc}") from None
    try:
        run = Run.load(folder)
    except OrsgenError as exc:
        raise OrsgenError(str(exc).replace("--resume", "--merge", 1)) from None
    if run.shard is None or not isinstance(saved.get("plan"), dict):
        raise OrsgenError(f"--merge {folder}: a whole run, not a shard (orsgen eval --shard I/N writes shards)")
    return Part(folder, run, saved)


def _foreign(first: Part, other: Part) -> str | None:
    """Why `other` is not a shard of `first`'s run, in words; None when it is."""
    assert first.run.shard is not None and other.run.shard is not None
    if first.pins != other.pins:
        return (f"it measured {_pins(other.pins)}, {first.folder} {_pins(first.pins)} (another module pin)")
    if first.run.shard.count != other.run.shard.count:
        return f"it is one of {other.run.shard.count} shards, {first.folder} one of {first.run.shard.count}"
    mine, theirs = first.run.saved(), other.run.saved()
    for name, value in mine.items():
        if name not in ("target", "shard") and theirs.get(name) != value:
            flag = FLAGS.get(name, f"--{name.replace('_', '-')}")
            return f"{flag} {_said(theirs.get(name))} against {_said(value)}"
    if first.saved["plan"] != other.saved["plan"]:
        return "its run's tasks differ (the environment listed other tasks when it started)"
    return None


def _pins(pins: list[tuple[str, str]]) -> str:
    return ", ".join(f"{name} at snapshot {snapshot[:12]}" for name, snapshot in pins) or "no environment"


def _said(value: Any) -> str:
    return "none" if value is None else repr(value) if isinstance(value, str) else str(value)
