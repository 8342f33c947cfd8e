"""`orsgen eval`'s command line, and what a run keeps of it (`run.json` in its folder) so that `--resume` repeats
exactly that run: the measured model, tasks, sampling and scoring, never a key."""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from orsgen.errors import OrsgenError

MAX_TURNS = 10  # GRPOConfig(max_tool_calling_iterations=10), as a generated module's usage shows it
CONCURRENCY = 16
TIMEOUT = 300.0
PASS_THRESHOLD = 1.0  # a pass: a reward of at least this, unless --pass-threshold says otherwise
MAX_TASKS = 1_000_000  # --tasks naming more is a typo (0-99999999), refused before a single index is built


@dataclass(frozen=True)
class Tasks:
    """`--tasks`: task indices as inclusive ranges, in the order given, each index once; never a list of them (a
    range of 10^8 tasks is two numbers), so it is checked before anything is built. Iterating gives the indices."""

    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, text: str) -> Tasks:
        pairs = []
        for part in text.split(","):
            found = re.fullmatch(r"\s*([0-9]{1,18})\s*(?:-\s*([0-9]{1,18})\s*)?", part)
            if found is None or (found[2] is not None and int(found[2]) < int(found[1])):
                raise ValueError(f"task indices as 0-99 or 3,5,10-19, not {text!r}")
            pairs.append((int(found[1]), int(found[2] or found[1])))
        return cls.of(pairs)

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> Tasks:
        """The ranges `pairs` name, each index kept where it first appears."""
        starts: list[int] = []  # what earlier ranges cover: sorted, disjoint
        ends: list[int] = []
        kept: list[tuple[int, int]] = []
        for low, high in pairs:
            first = last = bisect.bisect_left(ends, low)
            at = low
            while last < len(starts) and starts[last] <= high:
                if starts[last] > at:
                    kept.append((at, starts[last] - 1))
                at = max(at, ends[last] + 1)
                last += 1
            if at <= high:
                kept.append((at, high))
            starts[first:last] = [min(low, starts[first]) if last > first else low]
            ends[first:last] = [max(high, ends[last - 1]) if last > first else high]
        merged: list[tuple[int, int]] = []
        for low, high in kept:
            if merged and merged[-1][1] + 1 == low:
                low = merged.pop()[0]
            merged.append((low, high))
        return cls(tuple(merged))

    @classmethod
    def listed(cls, indices: Iterable[int]) -> Tasks:
        """A run.json from before ranges were kept: its list of indices."""
        return cls.of((int(i), int(i)) for i in indices)

    def __iter__(self) -> Iterator[int]:
        for low, high in self.ranges:
            yield from range(low, high + 1)

    def __len__(self) -> int:
        return sum(high - low + 1 for low, high in self.ranges)

    def __str__(self) -> str:
        return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in self.ranges)


def ranges(tasks: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """Tasks in order as runs of one environment and split, each run's indices as ranges ("0-99,120"): a plan of
    10^6 tasks is a few numbers. `expand` reads it back."""
    runs: list[tuple[str, str, list[int]]] = []
    for environment, split, index in tasks:
        if not runs or runs[-1][:2] != (environment, split):
            runs.append((environment, split, []))
        runs[-1][2].append(index)
    return [{"environment": e, "split": s, "tasks": str(Tasks.listed(indices))} for e, s, indices in runs]


def expand(saved: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(str(r["environment"]), str(r["split"]), index) for r in saved for index in Tasks.parse(r["tasks"])]


def public(url: str | None) -> tuple[str | None, list[str]]:
    """`url` as it may be saved or shown, and what of it was dropped: its `user:password@` ("userinfo") and its query
    string and fragment ("query", where some gateways take an API key)."""
    if url is None:
        return None, []
    found = re.match(r"([A-Za-z][A-Za-z0-9+.-]*://)?([^/?#]*@)?([^?#]*)", url)
    assert found is not None  # every part is optional
    dropped = [*(["userinfo"] if found[2] else []), *(["query"] if found.end() < len(url) else [])]
    return (found[1] or "") + found[3], dropped


@dataclass(frozen=True)
class Shard:
    """`--shard I/N`: the run's episodes numbered n with n % N == I (0 <= I < N), a deterministic, disjoint part of
    its (task, rollout) pairs: N shards, each launched on its own (a SLURM array, Ray tasks), cover the run once."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        found = re.fullmatch(r"\s*([0-9]{1,9})\s*/\s*([0-9]{1,9})\s*", text)
        if found is None or not 0 <= int(found[1]) < int(found[2]):
            raise ValueError(f"I/N with 0 <= I < N (the shard's index, from 0, and how many shards), not {text!r}")
        return cls(int(found[1]), int(found[2]))

    def holds(self, number: int) -> bool:
        return number % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class Run:
    """What defines a measurement: two runs with the same `Run` measure the same thing (`--resume` checks it)."""

    target: str  # the module, bundle or [tool.orsgen] target name, as given
    model: str
    split: str | None = None  # None: each module's pinned split
    tasks: Tasks | None = None  # --tasks; None: the first `num_tasks` (None: the whole split)
    num_tasks: int | None = None
    rollouts: int = 1  # -k
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None  # each episode's requests carry seed + its number: a rerun asks the same
    max_turns: int = MAX_TURNS
    pass_threshold: float = PASS_THRESHOLD  # recorded when the run starts: --resume and the figures keep it
    rewards: tuple[str, ...] = ()  # the module's reward functions by name, before get_reward() (as TRL runs them)
    unscored_reward: float | None = None
    shard: Shard | None = None  # --shard I/N: this part of the run's episodes (None: all of them)

    def saved(self) -> dict[str, Any]:
        found = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        found = {**found, "tasks": None if self.tasks is None else str(self.tasks)}  # "0-99,120", never a list
        found.pop("shard")
        return found if self.shard is None else {**found, "shard": str(self.shard)}  # "1/4"

    @classmethod
    def load(cls, folder: Path) -> Run:
        path = folder / "run.json"
        try:
            found = json.loads(path.read_text(encoding="utf-8"))["run"]
            given: dict[str, Any] = {f.name: tuple(found[f.name]) if isinstance(found.get(f.name), list) else
                                     found[f.name] for f in fields(cls) if f.name in found}
            tasks = given.get("tasks")
            given["tasks"] = (Tasks.parse(tasks) if isinstance(tasks, str) else  # an older run.json: a list
                              Tasks.listed(tasks) if tasks is not None else None)
            if given.get("pass_threshold") is None:  # an older run.json: null was "1.0 or the highest reward seen"
                given["pass_threshold"] = PASS_THRESHOLD
            if given.get("shard") is not None:
                given["shard"] = Shard.parse(given["shard"])
            return cls(**given)
        except FileNotFoundError:
            raise OrsgenError(f"--resume {folder}: no {path}: not the folder of an orsgen eval run") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise OrsgenError(f"--resume {folder}: {path} is not an orsgen eval run's record: {exc}") from None


@dataclass(frozen=True)
class Invocation:
    """One command: a run to do or resume, and how (none of it changes what is measured)."""

    run: Run | None
    base_url: str | None  # --base-url as given (None: OPENAI_BASE_URL, read where the run's endpoint is chosen)
    out: Path | None
    resume: Path | None
    concurrency: int | None  # None: what the resumed run used, else CONCURRENCY
    timeout: float
    format: str
    keep_passing: Path | None
    compare: tuple[Path, Path] | None
    merge: tuple[Path, ...] | None = None  # --merge DIR...: shard folders, into --out
    max_sessions: int | None = None  # --max-sessions: the sessions budget per environment


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen eval --help lists the options)\n")


EPILOG = """examples:
  orsgen eval generated/seta.py --base-url http://127.0.0.1:8020/v1 --model Qwen/Qwen3-4B -n 50 -k 4
  orsgen eval seta --model gpt-4.1-mini --tasks 0-99 --out runs/eval-base     a [tool.orsgen] target
  orsgen eval --resume runs/eval-base                                           the episodes still missing
  orsgen eval --compare runs/eval-base runs/eval-trained --format markdown      before and after, task by task
a model on this machine: transformers serve DIR --port 8020 (on CPU, one that calls your tools: python -m orsgen.tiny
  MODULE -o DIR, its environment served), then --base-url http://127.0.0.1:8020/v1 --model DIR
  orsgen eval seta --model M -n 1000 -k 4 --shard 0/8 --out runs/s0             one of 8 parts, on any machine
  orsgen eval --merge runs/s0 runs/s1 ... runs/s7 --out runs/eval-base          the 8 parts as one run
environment: OPENAI_BASE_URL and OPENAI_API_KEY (the endpoint, as the openai client reads them), OPENREWARD_API_KEY
exit codes: 0 done, 2 bad input or an endpoint or environment that cannot run an episode, 130 interrupted (resumable)
"""


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="orsgen eval", allow_abbrev=False, epilog=EPILOG,
                formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=30, width=110),
                description="Measure a model behind an OpenAI-compatible endpoint on an environment, with the tools, "
                "turn limit and rewards training uses: mean reward, pass@1, pass@k, per task.")
    p.add_argument("target", nargs="?", metavar="TARGET", help="a generated module or bundle (.py), or a "
                   "[tool.orsgen] target name")
    p.add_argument("--model", help="the model name the endpoint serves")
    p.add_argument("--base-url", help="the endpoint, e.g. http://127.0.0.1:8020/v1 (default: OPENAI_BASE_URL)")
    p.add_argument("-n", "--num-tasks", type=_count, metavar="N", help="the first N tasks of the split (default: all)")
    p.add_argument("--tasks", type=_tasks, metavar="SPEC", help="task indices: 0-99, or 3,5,10-19")
    p.add_argument("-k", "--rollouts", type=_count, default=1, metavar="K", help="episodes per task (default 1)")
    p.add_argument("--split", help="the split (default: the module's pinned split)")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--max-tokens", type=_count, metavar="N", help="most tokens per reply")
    p.add_argument("--seed", type=int, help="sampling seed: episode i's requests carry seed + i")
    p.add_argument("--max-turns", type=_count, default=MAX_TURNS, metavar="N", help="tool rounds per episode, as "
                   f"GRPOConfig's max_tool_calling_iterations (default {MAX_TURNS}, the generated module's usage)")
    p.add_argument("--pass-threshold", type=_number, metavar="X", help="a pass is a reward of at least X (default "
                   f"{PASS_THRESHOLD:g}, recorded in the run's run.json)")
    p.add_argument("--reward", action="append", default=[], metavar="NAME", help="a reward function of the module "
                   "(total_reward, ...), run before get_reward() as TRL runs reward_funcs; repeatable")
    p.add_argument("--unscored-reward", type=float, metavar="X", help="the adapter's unscored_reward")
    p.add_argument("--concurrency", type=_count, metavar="N", help=f"episodes at once (default {CONCURRENCY}, or "
                   "what a resumed run used; halved while the endpoint or the environment answers 429)")
    p.add_argument("--max-sessions", type=_count, metavar="N", help="sessions open at once per environment (default: no "
                   "bound but --concurrency; ORSGEN_MAX_SESSIONS): an episode past it waits for one to close")
    p.add_argument("--timeout", type=float, default=TIMEOUT, metavar="S", help=f"seconds per model reply (default "
                   f"{TIMEOUT:g})")
    p.add_argument("--out", type=Path, metavar="DIR", help="where the run goes (default: evals/ENV-MODEL-TIME)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="run the episodes DIR's run is missing")
    p.add_argument("--format", choices=("text", "markdown"), default="text", help="the report on stdout")
    p.add_argument("--keep-passing", type=Path, metavar="DIR", help="write the passing episodes to DIR/passing.jsonl "
                   "as a chat dataset (messages, tools) for TRL's SFTTrainer")
    p.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two runs task by task")
    p.add_argument("--shard", type=_shard, metavar="I/N", help="run part I of N (I from 0): episode n when n %% N == I; "
                   "each part its own --out, resumable on its own")
    p.add_argument("--merge", type=Path, nargs="+", metavar="DIR", help="the N shard folders of one run, into --out "
                   "as that run")
    return p


def _count(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,18}", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {text!r}")
    return int(text)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"a number, not {text!r}")
    return value


def _tasks(text: str) -> Tasks:
    try:
        found = Tasks.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if len(found) > MAX_TASKS:
        raise argparse.ArgumentTypeError(f"{text} names {len(found)} tasks, more than one run takes ({MAX_TASKS}): "
                                         "-n N measures the first N, no --tasks the whole split")
    return found


def _flag(name: str) -> str:
    return "TARGET" if name == "target" else "--" + name.replace("_", "-")


def _differing(args: argparse.Namespace, given: set[str], folder: Path) -> dict[str, str]:
    """The options given with --resume that differ from what its run recorded, each with what the run had (all of
    them when its run.json cannot be read: `measure` says why)."""
    try:
        run = Run.load(folder)
    except OrsgenError:
        return {name: "" for name in given}
    found = {}
    for name in given:
        value, field = getattr(args, name), "rewards" if name == "reward" else name
        saved = getattr(run, field)
        same = (os.path.normpath(value) == os.path.normpath(saved) if name == "target" else
                tuple(value) == saved if name == "reward" else value == saved)
        if not same:
            found[name] = f" (the run has {_flag(name) if name != 'target' else 'TARGET'} {_shown(saved)})"
    return found


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(value) or "none"
    return "none" if value is None else str(value)
def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def invocation(argv: list[str]) -> Invocation:
    args = parser().parse_args(argv)
    given = {name for name in ("target", "model", "num_tasks", "tasks", "split", "temperature", "top_p", "max_tokens",
                               "seed", "pass_threshold", "unscored_reward") if getattr(args, name) is not None}
    given |= {name for name, default in (("rollouts", 1), ("max_turns", MAX_TURNS), ("reward", []))
              if getattr(args, name) != default}
    given |= {"shard"} if args.shard is not None else set()
    flags = ", ".join(sorted(_flag(name) for name in given))
    if args.merge:
        if given or args.resume or args.compare or args.keep_passing:
            raise OrsgenError(f"--merge DIR... reads the shards' own run.json: drop "
                              f"{flags or '--resume/--compare/--keep-passing'}")
        if not args.out:
            raise OrsgenError("--merge DIR... --out DIR: give --out, the merged run's folder (new or empty)")
        return Invocation(None, None, args.out, None, args.concurrency, args.timeout, args.format, None, None,
                          tuple(args.merge))
    if args.compare:
        if given or args.resume or args.out or args.keep_passing:
            raise OrsgenError(f"--compare A B reads two finished runs: drop {flags or '--resume/--out/--keep-passing'}")
        return Invocation(None, None, None, None, args.concurrency, args.timeout, args.format, None,
                          (args.compare[0], args.compare[1]))
    if args.resume:
        differing = _differing(args, given, args.resume)  # the run's own arguments, typed again, are what it repeats
        if differing:
            named = ", ".join(sorted(_flag(name) for name in differing))
            raise OrsgenError(f"--resume {args.resume} repeats the run recorded in its run.json: drop {named}"
                              f"{differing[min(differing)]} (or start a new run with --out)")
        if args.out:
            raise OrsgenError("--resume DIR writes into DIR: drop --out")
        run = None
    else:
        if not args.target:
            raise OrsgenError("give a TARGET: a generated module (generated/seta.py), a bundle, or a [tool.orsgen] "
                              "target name")
        if not args.model:
            raise OrsgenError("give --model: the name the endpoint serves the model under (its /v1/models lists them)")
        if args.tasks and args.num_tasks:
            raise OrsgenError("give -n or --tasks, not both")
        if args.temperature is not None and args.temperature < 0:
            raise OrsgenError(f"--temperature {args.temperature:g}: at least 0")
        bar = PASS_THRESHOLD if args.pass_threshold is None else args.pass_threshold
        run = Run(args.target, args.model, args.split, args.tasks, args.num_tasks, args.rollouts, args.temperature,
                  args.top_p, args.max_tokens, args.seed, args.max_turns, bar, tuple(args.reward),
                  args.unscored_reward, args.shard)
    if args.timeout <= 0:
        raise OrsgenError(f"--timeout {args.timeout:g}: more than 0 seconds")
    return Invocation(run, args.base_url or None, args.out, args.resume, args.concurrency, args.timeout, args.format,
                      args.keep_passing, None, None, args.max_sessions)
