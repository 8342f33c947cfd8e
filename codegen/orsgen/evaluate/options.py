"""`orsgen eval`'s command line, and what a run keeps of it (`run.json` in its folder) so that `--resume` repeats
exactly that run: the measured model, tasks, sampling and scoring, never a key."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from orsgen.errors import OrsgenError

MAX_TURNS = 10  # GRPOConfig(max_tool_calling_iterations=10), as a generated module's usage shows it
CONCURRENCY = 16
TIMEOUT = 300.0


@dataclass(frozen=True)
class Run:
    """What defines a measurement: two runs with the same `Run` measure the same thing (`--resume` checks it)."""

    target: str  # the module, bundle or [tool.orsgen] target name, as given
    model: str
    split: str | None = None  # None: each module's pinned split
    tasks: tuple[int, ...] | None = None  # --tasks; None: the first `num_tasks` (None: the whole split)
    num_tasks: int | None = None
    rollouts: int = 1  # -k
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None  # each episode's requests carry seed + its number: a rerun asks the same
    max_turns: int = MAX_TURNS
    pass_threshold: float | None = None  # None: 1.0, or the highest reward seen when that is higher
    rewards: tuple[str, ...] = ()  # the module's reward functions by name, before get_reward() (as TRL runs them)
    unscored_reward: float | None = None

    def saved(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def load(cls, folder: Path) -> Run:
        path = folder / "run.json"
        try:
            found = json.loads(path.read_text(encoding="utf-8"))["run"]
            given: dict[str, Any] = {f.name: tuple(found[f.name]) if isinstance(found.get(f.name), list) else
                                     found[f.name] for f in fields(cls) if f.name in found}
            return cls(**given)
        except FileNotFoundError:
            raise OrsgenError(f"--resume {folder}: no {path}: not the folder of an orsgen eval run") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise OrsgenError(f"--resume {folder}: {path} is not an orsgen eval run's record: {exc}") from None


@dataclass(frozen=True)
class Invocation:
    """One command: a run to do or resume, and how (none of it changes what is measured)."""

    run: Run | None
    base_url: str | None
    out: Path | None
    resume: Path | None
    concurrency: int
    timeout: float
    format: str
    keep_passing: Path | None
    compare: tuple[Path, Path] | None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen eval --help lists the options)\n")


EPILOG = """examples:
  orsgen eval generated/seta.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-4B -n 50 -k 4
  orsgen eval seta --model gpt-4.1-mini --tasks 0-99 --out runs/eval-base     a [tool.orsgen] target
  orsgen eval --resume runs/eval-base                                           the episodes still missing
  orsgen eval --compare runs/eval-base runs/eval-trained --format markdown      before and after, task by task
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
    p.add_argument("--base-url", help="the endpoint, e.g. http://127.0.0.1:8000/v1 (default: OPENAI_BASE_URL)")
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
    p.add_argument("--pass-threshold", type=float, metavar="X", help="a pass is a reward of at least X (default 1.0, "
                   "or the highest reward seen when higher)")
    p.add_argument("--reward", action="append", default=[], metavar="NAME", help="a reward function of the module "
                   "(total_reward, ...), run before get_reward() as TRL runs reward_funcs; repeatable")
    p.add_argument("--unscored-reward", type=float, metavar="X", help="the adapter's unscored_reward")
    p.add_argument("--concurrency", type=_count, default=CONCURRENCY, metavar="N", help=f"episodes at once (default "
                   f"{CONCURRENCY}, halved while the endpoint or the environment answers 429)")
    p.add_argument("--timeout", type=float, default=TIMEOUT, metavar="S", help=f"seconds per model reply (default "
                   f"{TIMEOUT:g})")
    p.add_argument("--out", type=Path, metavar="DIR", help="where the run goes (default: evals/ENV-MODEL-TIME)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="run the episodes DIR's run is missing")
    p.add_argument("--format", choices=("text", "markdown"), default="text", help="the report on stdout")
    p.add_argument("--keep-passing", type=Path, metavar="DIR", help="write the passing episodes to DIR/passing.jsonl "
                   "as a chat dataset (messages, tools) for TRL's SFTTrainer")
    p.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two runs task by task")
    return p


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {text!r}")
    return int(text)


def _tasks(text: str) -> tuple[int, ...]:
    found: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or (dash and int(high) < int(low)):
            raise argparse.ArgumentTypeError(f"task indices as 0-99 or 3,5,10-19, not {text!r}")
        found += range(int(low), int(high) + 1) if dash else [int(low)]
    return tuple(dict.fromkeys(found))


def invocation(argv: list[str]) -> Invocation:
    args = parser().parse_args(argv)
    given = {name for name in ("target", "model", "num_tasks", "tasks", "split", "temperature", "top_p", "max_tokens",
                               "seed", "pass_threshold", "unscored_reward") if getattr(args, name) is not None}
    given |= {name for name, default in (("rollouts", 1), ("max_turns", MAX_TURNS), ("reward", []))
              if getattr(args, name) != default}
    flags = ", ".join(sorted("--" + name.replace("_", "-") if name != "target" else "TARGET" for name in given))
    if args.compare:
        if given or args.resume or args.out or args.keep_passing:
            raise OrsgenError(f"--compare A B reads two finished runs: drop {flags or '--resume/--out/--keep-passing'}")
        return Invocation(None, None, None, None, args.concurrency, args.timeout, args.format, None,
                          (args.compare[0], args.compare[1]))
    if args.resume:
        if given:
            raise OrsgenError(f"--resume {args.resume} repeats the run recorded in its run.json: drop {flags} (or start "
                              "a new run with --out)")
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
        run = Run(args.target, args.model, args.split, args.tasks, args.num_tasks, args.rollouts, args.temperature,
                  args.top_p, args.max_tokens, args.seed, args.max_turns, args.pass_threshold, tuple(args.reward),
                  args.unscored_reward)
    if args.timeout <= 0:
        raise OrsgenError(f"--timeout {args.timeout:g}: more than 0 seconds")
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    return Invocation(run, base_url, args.out, args.resume, args.concurrency, args.timeout, args.format,
                      args.keep_passing, None)
