"""A split's tasks as dataset rows (`Pinned.dataset`): task specs from the pinned file or by task ranges, prompts
read in short sessions (the environment's opener), columns Arrow can hold; and a bundle's rows of several
environments (`bundle`)."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from orsgen.runtime import client, messages, settings
from orsgen.runtime.errors import named
from orsgen.runtime.sessions import Connection, Sessions

if TYPE_CHECKING:
    import datasets


class Source(Protocol):
    """What the rows are read from: a pinned environment (`Pinned`)."""

    tasks_file: str | None
    task_classes: dict[int, str]
    task_tools_split: str | None
    default_class: str
    conversations: set[tuple[str, int]]
    sessions: Sessions

    def pinned_tasks(self) -> dict[str, list[Any]] | None: ...

log = logging.getLogger("orsgen")

RESERVED_COLUMNS = ("prompt", "task_index", "split", "environment", "task_prompt")
CHUNK = 1024  # tasks per request when a split is large enough for a progress bar


def dataset(pinned: Source, split: str, num_tasks: int | None, indices: Sequence[int] | None,
            include_metadata: bool, prompts: bool, connection: Connection) -> datasets.Dataset:
    """The rows of `Pinned.dataset`, whose arguments it has checked."""
    from datasets import Dataset

    if indices is None:
        tasks = task_specs(pinned, split, 0, num_tasks, connection)
        if num_tasks is not None and len(tasks) < num_tasks:
            raise ValueError(f"dataset(): split {split!r} has {len(tasks)} tasks, {num_tasks} were asked for")
        chosen = list(enumerate(tasks))
    else:
        wanted = [int(i) for i in indices]
        if not wanted or min(wanted) < 0:
            raise ValueError(f"dataset(): indices must be a non-empty list of indices >= 0, got {list(indices)}")
        start = min(wanted)
        tasks = task_specs(pinned, split, start, max(wanted) + 1, connection)
        if max(wanted) >= start + len(tasks):
            raise ValueError(f"dataset(): index {max(wanted)} is out of range: split {split!r} has fewer tasks")
        chosen = [(i, tasks[i - start]) for i in wanted]
    specs = [spec if include_metadata and isinstance(spec, dict) else {} for _, spec in chosen]
    columns: dict[str, list[Any]] = {
        "prompt": [[{"role": "user", "content": ""}] for _ in chosen],
        "task_index": [i for i, _ in chosen],
        "split": [split for _ in chosen],
    }
    if pinned.task_classes and split == pinned.task_tools_split:  # task-specific tools: route each row to its class
        columns["environment"] = [pinned.task_classes.get(i, pinned.default_class) for i, _ in chosen]
    if prompts:  # a conversation's turns go in `prompt`, its last user turn in `task_prompt` (messages.py)
        read = pinned.sessions.read_prompts(connection, split, [i for i, _ in chosen], settings.resolve(None))
        columns["prompt"], columns["task_prompt"] = messages.columns(read)
        pinned.conversations.update((split, i) for (i, _), turns in zip(chosen, read, strict=True) if len(turns) > 1)
    for key in sorted({k for spec in specs for k in spec} - set(RESERVED_COLUMNS)):
        columns[key] = one_type([spec.get(key) for spec in specs])
    return Dataset.from_dict(columns)


def task_specs(pinned: Source, split: str, start: int, stop: int | None, connection: Connection) -> list[Any]:
    """Task specs start..stop of a split: from the pinned file, else by task ranges (never one request per task)."""
    splits = pinned.pinned_tasks()
    if splits is not None:
        if split not in splits:
            raise ValueError(f"dataset(): split {split!r} is not in {pinned.tasks_file} (it has {sorted(splits)})")
        return list(splits[split][start:stop])
    env = pinned.sessions.environment(connection)
    run = client.loop().run
    if stop is None or stop - start <= CHUNK:
        return [task.task_spec for task in run(env.get_task_range(split, start, stop), "reset")]
    from tqdm.auto import tqdm

    specs: list[Any] = []
    with tqdm(total=stop - start, desc=f"tasks of {split}", unit="task") as bar:
        for lo in range(start, stop, CHUNK):
            chunk = run(env.get_task_range(split, lo, min(lo + CHUNK, stop)), "reset")
            specs += [task.task_spec for task in chunk]
            bar.update(len(chunk))
            if len(chunk) < min(CHUNK, stop - lo):
                break
    return specs


def one_type(values: list[Any]) -> list[Any]:
    """A column Arrow can hold: values of mixed or nested types are JSON-encoded (None stays None)."""
    kinds = {type(v) for v in values if v is not None}
    if len(kinds) > 1 or not kinds <= {str, int, float, bool}:
        return [v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values]
    return values


def bundle(modules: Mapping[str, ModuleType], split: str | None, num_tasks: int | None,
           include_metadata: bool) -> datasets.Dataset:
    """A bundle's `dataset()`: every environment's tasks (`num_tasks` of each) in one dataset, each row's
    `environment` naming its adapter in the bundle's ENVIRONMENTS ("name", or "name.Class" for a task-specific
    class). An environment that cannot give them raises, naming it: nothing is silently left out of the mix."""
    from datasets import Dataset

    rows: list[dict[str, Any]] = []
    for name, module in modules.items():
        try:
            part = module.dataset(split=split, num_tasks=num_tasks, include_metadata=include_metadata)
        except Exception as exc:  # noqa: BLE001 - re-raised as the same kind of error, naming the environment
            raise named(exc, f"bundle.dataset(): environment {name!r}") from None
        base = module.PINNED.default_class
        for row in part.to_list():
            own = row.get("environment", base)
            rows.append({**row, "environment": name if own == base else f"{name}.{own}"})
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return Dataset.from_dict({key: [row.get(key) for row in rows] if key in RESERVED_COLUMNS
                              else one_type([row.get(key) for row in rows]) for key in keys})


def pass_rates(source: str | os.PathLike[str] | Mapping[Any, float], environment: str, split: str) -> dict[int, float]:
    """Per-task pass rates measured before training (`dataset(pass_rates=...)`): an `orsgen eval --out` folder or its
    summary.json (this environment's tasks of `split`), a JSON file of task index -> pass rate, or such a mapping.
    ValueError, one line, for anything else."""
    where = f"dataset(pass_rates={str(source) if not isinstance(source, Mapping) else '{...}'!r})"
    found: Any = source
    if not isinstance(source, Mapping):
        path = Path(source)
        path = path / "summary.json" if path.is_dir() else path
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{where}: cannot read {path}: {exc}") from None
    if isinstance(found, dict) and isinstance(found.get("tasks"), list):  # an `orsgen eval` summary
        bar = found["pass"] if isinstance(found.get("pass"), dict) else {}
        if bar.get("given", 1.0) is None and bar.get("threshold") != 1.0:  # the bar was "the highest reward seen"
            raise ValueError(f"{where}: its pass rates rest on a bar of {bar.get('threshold')}, the highest reward "
                             "that run saw (orsgen eval before its bar was fixed): orsgen eval --resume on its folder "
                             "recomputes them at 1.0")
        mine = [t for t in found["tasks"] if isinstance(t, dict) and t.get("split") == split
                and t.get("environment") in (environment, None) and t.get("pass_rate") is not None]
        if not mine:
            seen = sorted({f"{t.get('environment')}/{t.get('split')}" for t in found["tasks"] if isinstance(t, dict)})
            raise ValueError(f"{where}: it measured no task of {environment}/{split} (it measured "
                             f"{', '.join(seen) or 'nothing'})")
        found = {t["task_index"]: t["pass_rate"] for t in mine}
    if not isinstance(found, Mapping):
        raise ValueError(f"{where}: an orsgen eval folder, its summary.json, or a JSON object of task index -> pass "  # noqa: TRY004 - a file that holds the wrong thing
                         "rate")
    rates: dict[int, float] = {}
    for key, rate in found.items():
        try:
            index, value = int(key), float(rate)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: task {key!r}: {rate!r} is not a task index and a pass rate") from None
        if not (0.0 <= value <= 1.0 and index >= 0):
            raise ValueError(f"{where}: task {key!r}: a pass rate is between 0 and 1, got {rate!r}")
        rates[index] = value
    return rates


WEIGHT = 4  # weight=True: a task at pass rate 0.5 appears this many times


def kept(rows: datasets.Dataset, rates: Mapping[int, float], keep: tuple[float, float], split: str,
         weight: bool | int = False) -> datasets.Dataset:
    """The rows whose task's pass rate lies strictly between `keep`'s bounds, and one line saying what was kept.
    With `weight` (True, or the copies of a task at pass rate 0.5), each kept row appears in proportion to p(1-p),
    the reward variance its GRPO groups would have: round(copies x 4p(1-p)) times, at least once; the copies are
    spread out (every task once, then those with a second copy, ...), and a second line says how many rows."""
    try:
        low, high = (float(bound) for bound in keep)
    except (TypeError, ValueError):
        raise ValueError(f"dataset(keep={keep!r}): two numbers, (low, high): tasks with a pass rate strictly between "
                         "them are kept") from None
    if not (low < high) or math.isnan(low) or math.isnan(high):
        raise ValueError(f"dataset(keep={keep!r}): low must be below high")
    indices = rows["task_index"]
    chosen = [i for i, task in enumerate(indices) if task in rates and low < rates[task] < high]
    below = sum(1 for task in indices if task in rates and rates[task] <= low)
    above = sum(1 for task in indices if task in rates and rates[task] >= high)
    unmeasured = sum(1 for task in indices if task not in rates)
    log.warning("orsgen: dataset(): kept %d of %d tasks of split %r, those with a pass rate strictly between %g and "
                "%g (%d at or below, %d at or above, %d not measured)", len(chosen), len(indices), split, low, high,
                below, above, unmeasured)
    if not chosen:
        raise ValueError(f"dataset(pass_rates=..., keep={keep!r}): no task of split {split!r} has a pass rate strictly "
                         f"between {low:g} and {high:g} ({below} at or below, {above} at or above, {unmeasured} not "
                         "measured): nothing to train on")
    if weight is False:
        return rows.select(chosen)
    most = WEIGHT if weight is True else weight
    if isinstance(most, bool) or not isinstance(most, int) or most < 1:
        raise ValueError(f"dataset(weight={weight!r}): True, or the copies of a task at pass rate 0.5 (1 or more)")
    copies = {i: max(1, round(most * 4 * rates[indices[i]] * (1 - rates[indices[i]]))) for i in chosen}
    spread = [i for n in range(max(copies.values())) for i in chosen if copies[i] > n]
    log.warning("orsgen: dataset(): %d rows for %d tasks, weighted by p(1-p) (a task at pass rate 0.5 %d times, "
                "each at least once)", len(spread), len(chosen), most)
    return rows.select(spread)
