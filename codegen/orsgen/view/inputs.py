"""What `orsgen view` reads: an `orsgen eval` folder (run.json, summary.json, trajectories.jsonl), a training run's
trajectory files (`trajectories-rank*.jsonl`, given as files or as the folder holding them: every rank's file), or two
eval folders (a comparison). Anything else is one line saying what was expected."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orsgen.errors import OrsgenError

SCHEMA = "orsgen.trajectory/1"
EVAL_RECORDS, EVAL_SUMMARY, EVAL_RUN = "trajectories.jsonl", "summary.json", "run.json"
RANK_FILES = "trajectories-rank*.jsonl"  # every rank's file, and AsyncGRPOTrainer's worker's (-pidN)


@dataclass
class Source:
    """One run as read: its records (in file order), and for an eval run its summary.json and run.json."""

    name: str
    records: list[dict[str, Any]]
    files: list[Path]
    summary: dict[str, Any] | None = None
    run: dict[str, Any] = field(default_factory=dict)
    skipped: int = 0  # lines that were not records: a line a running (or killed) writer left cut, or another file's


@dataclass
class Inputs:
    kind: str  # "eval", "training" or "compare"
    sources: list[Source]


def read(paths: list[Path]) -> Inputs:
    """The run(s) `paths` name; an OrsgenError saying what is wrong otherwise."""
    evals = [p for p in paths if p.is_dir() and (p / EVAL_SUMMARY).exists()]
    others = [p for p in paths if p not in evals]
    for path in others:
        if not path.exists():
            raise OrsgenError(f"{path}: no such file or folder (orsgen view takes an orsgen eval folder, training "
                              "trajectory files or the folder holding them, or two eval folders)")
        if path.is_dir() and (path / EVAL_RECORDS).exists():
            raise OrsgenError(f"{path}: an orsgen eval folder without its summary.json (the run was stopped before "
                              f"its end): orsgen eval --resume {path} finishes it")
        if path.is_dir() and not list(path.glob(RANK_FILES)):
            raise OrsgenError(f"{path}: neither an orsgen eval folder (summary.json) nor a folder of training "
                              f"trajectories ({RANK_FILES})")
    if evals and others:
        raise OrsgenError(f"give eval folders or training trajectories, not both: {evals[0]} is an orsgen eval "
                          f"folder, {others[0]} is not")
    if len(evals) > 2:
        raise OrsgenError(f"{len(evals)} eval folders: orsgen view shows one, or compares two")
    if evals:
        return Inputs("eval" if len(evals) == 1 else "compare", [_eval(p) for p in evals])
    files: list[Path] = []
    for path in others:
        found = sorted(path.glob(RANK_FILES)) if path.is_dir() else [path]
        files += [f for f in found if f not in files]
    sources = [_records(f) for f in files]
    records = [r for s in sources for r in s.records]
    if not records:
        raise OrsgenError(f"{', '.join(map(str, files))}: no orsgen trajectory record ({SCHEMA}) in "
                          f"{'it' if len(files) == 1 else 'them'}")
    names = list(dict.fromkeys(str(r.get("run")) for r in records if r.get("run")))
    name = ", ".join(names) or (files[0].parent.name if len(files) > 1 else files[0].name)
    return Inputs("training", [Source(name, records, files, skipped=sum(s.skipped for s in sources))])


def _eval(folder: Path) -> Source:
    summary = _json(folder / EVAL_SUMMARY)
    if summary.get("schema") != "orsgen.eval/1":
        raise OrsgenError(f"{folder / EVAL_SUMMARY}: not an orsgen eval summary (its schema is "
                          f"{summary.get('schema')!r})")
    run = _json(folder / EVAL_RUN) if (folder / EVAL_RUN).exists() else {}
    found = _records(folder / EVAL_RECORDS) if (folder / EVAL_RECORDS).exists() else Source(folder.name, [], [])
    return Source(folder.resolve().name, found.records, [folder / EVAL_RECORDS], summary, run, found.skipped)


def _json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OrsgenError(f"cannot read {path}: {exc}") from None
    if not isinstance(found, dict):
        raise OrsgenError(f"{path}: not a JSON object")
    return found


def _records(path: Path) -> Source:
    """A JSONL file's trajectory records; lines that are not one (a line cut by a writer still running) skipped and
    counted."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise OrsgenError(f"cannot read {path}: {exc.strerror or exc}") from None
    records, skipped = [], 0
    for line in text.split("\n"):  # not splitlines(): a record's text may hold U+2028, a line break to it
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(record, dict) and record.get("schema") == SCHEMA:
            records.append(record)
        else:
            skipped += 1
    return Source(path.name, records, [path], skipped=skipped)
