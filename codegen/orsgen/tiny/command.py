"""`python -m orsgen.tiny MODULE -o DIR`: play the tasks by hand (`play`), teach the tiny model those episodes
(`model`), save it where `GRPOTrainer` and `transformers serve` load it from."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from orsgen.errors import OrsgenError
from orsgen.tiny.model import STEPS, call_text, first_turn, model, tokenizer_of, warm_up
from orsgen.tiny.play import Played, play

MARKER = "orsgen-tiny.json"  # written last into a built folder: how it was built and how the warm-up went
TASKS = 8  # tasks played by hand (each one episode the model learns)
DESCRIPTION = ("Build and save a tiny chat model (~100k parameters, on the CPU, nothing downloaded) that calls the "
               "tools of a generated module's environment, which must be served.")


def build(target: str, out: Path, num_tasks: int = TASKS, steps: int = STEPS, seed: int = 0,
          say: Callable[[str], None] = print) -> dict[str, Any]:
    """Play the first `num_tasks` tasks of each environment `target` (a generated module or bundle) names, teach the
    tiny model their best calls, save it into `out`; what was done (also in `out`/orsgen-tiny.json)."""
    from orsgen.evaluate import target as targets

    started = time.monotonic()
    if out.exists() and (not out.is_dir() or any(out.iterdir()) and not (out / MARKER).is_file()):
        raise OrsgenError(f"-o {out}: {'a file' if not out.is_dir() else 'a folder orsgen.tiny did not write'}: "
                          "nothing there is replaced; give a new folder, or one it wrote before")
    members = targets.members(target)
    where = ", ".join(str(m.module.PINNED.sessions.server(None) or m.module.PINNED.target) for m in members)
    say(f"orsgen tiny: {target}: asking its environment at {where} for its tools and tasks")
    for member in members:  # out of reach, or serving other tools than it pinned: one line, before torch is imported
        try:
            member.check()
        except OrsgenError as exc:
            raise OrsgenError(f"{exc} (python -m orsgen.tiny plays the tasks on the served environment: is it "
                              "running? orsgen serve MODULE:CLASS --port N)") from None
    _need_torch()
    from orsgen import runtime

    played: list[Played] = []
    try:
        for member in members:
            rows = _rows(member, num_tasks)
            where = member.module.PINNED.sessions.server(None) or member.module.PINNED.target
            say(f"orsgen tiny: playing {len(rows)} tasks of {member.name} ({member.split}) at {where} by hand: the "
                "call each rewards most")
            for row in rows:
                found = play(member, row, say)
                if found is None:
                    say(f"  task {row['task_index']}: no call the environment took (kept out)")
                    continue
                say(found.line())
                played.append(found)
    finally:
        runtime.close_all()
    if not played:
        raise OrsgenError(f"{target}: no task took any call made of its prompt's words, its metadata and the enums' "
                          "choices: the tiny model has nothing to learn from")
    rewarded = sum(1 for p in played if p.reward is not None and p.reward >= 1.0)

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is tiny: on 2 busy cores one thread is several times faster than two
    try:
        tok = tokenizer_of([p.lesson() for p in played])
        lm = model(tok, seed=seed)
        size = sum(p.numel() for p in lm.parameters())
        say(f"orsgen tiny: {rewarded} of {len(played)} tasks earned a reward of 1.0 or more; teaching a two-layer "
            f"Qwen3 ({size:,} parameters) those calls on the CPU, at most {steps} steps")
        warm = warm_up(lm, tok, [p.lesson() for p in played], steps, say)
        replayed = sum(first_turn(lm, tok, p.tools, p.prompt) == call_text(p.name, p.arguments) for p in played)
    finally:
        torch.set_num_threads(threads)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Writing model shards" for a file of 400 kB
    out.parent.mkdir(parents=True, exist_ok=True)
    info = {"target": target, "tasks": len(played), "rewarded": rewarded, "replayed": replayed, "parameters": size,
            **warm, "seconds": round(time.monotonic() - started, 1)}
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as scratch:  # whole, or not at all
        made = Path(scratch) / "model"
        tok.save_pretrained(made)
        lm.save_pretrained(made)
        (made / MARKER).write_text(json.dumps(info, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)  # a model it built before (its MARKER says so)
        made.rename(out)
    say(f"orsgen tiny: saved {out} in {info['seconds']:.0f} s: {warm['warm_up_steps']} warm-up steps, "
        f"{replayed} of {len(played)} calls written back exactly by a greedy first turn")
    return info


def _rows(member: Any, num_tasks: int) -> list[dict[str, Any]]:
    from orsgen.runtime import client

    try:
        try:
            return list(member.module.dataset(num_tasks=num_tasks).to_list())
        except ValueError:  # fewer tasks than that: all of them
            return list(member.module.dataset().to_list())
    except Exception as exc:  # noqa: BLE001 - an environment that cannot list its tasks: one line
        where = member.module.PINNED.sessions.server(None) or member.module.PINNED.target
        raise OrsgenError(f"the environment {member.name} at {where} cannot list its tasks: "
                          f"{client.describe(exc)[:300]}: is it running (orsgen serve)?") from None


def _need_torch() -> None:
    import importlib.util

    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise OrsgenError(f"orsgen.tiny trains a model: it needs {' and '.join(missing)} (a training install: torch "
                          "first, the build your machine needs, then orsgen's train extra)")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (python -m orsgen.tiny --help lists the options)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m orsgen.tiny", allow_abbrev=False, description=DESCRIPTION,
                epilog="then: transformers serve DIR --port 8020, and orsgen eval MODULE --base-url "
                "http://127.0.0.1:8020/v1 --model DIR")
    p.add_argument("target", metavar="MODULE", help="a generated module or bundle (.py), its environment served")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="the folder to save the model in")
    p.add_argument("-n", "--num-tasks", type=int, default=TASKS, metavar="N",
                   help=f"tasks played by hand, the first of the split (default {TASKS})")
    p.add_argument("--steps", type=int, default=STEPS, metavar="N", help=f"most warm-up steps (default {STEPS})")
    p.add_argument("--seed", type=int, default=0, help="the model's initial weights")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(key, "1")  # nothing is downloaded
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.num_tasks < 1 or args.steps < 0:
        print("orsgen: error: -n takes 1 or more tasks, --steps 0 or more", file=sys.stderr)
        return 2
    try:
        build(args.target, args.output, args.num_tasks, args.steps, args.seed,
              say=lambda line: print(line, flush=True))
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"orsgen tiny: interrupted: nothing saved in {args.output}", file=sys.stderr)
        return 130
    return 0
