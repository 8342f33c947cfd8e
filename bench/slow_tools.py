"""Tools that take time, as commands in a sandbox do: a real GRPOTrainer on both sides against the bench environment
with every `echo` call taking `--tool-ms` (500 ms) on the server and every request `--latency-ms` (20 ms) more,
several tool turns per episode (`--turns`, 3), in one run.

    python bench/slow_tools.py [--runs 2] [--tool-ms 500] [--latency-ms 20] [--turns 3]

`--tool-ms 0` gives the 20 ms-per-request figures with the same turns. Sides: TRL's `OpenRewardSpec` (its dataset,
factory and reward); orsgen with `train_dataset=dataset(...)` and ORSGEN_BATCH_CALLS=0 (a turn's calls one by one,
as GRPOTrainer makes them); orsgen with ORSGEN_BATCH_CALLS=1 (the first call of a turn starts the turn's calls of
the batch's later rollouts at once). Both orsgen sides open sessions ahead (the default). The model is scripted on
every turn (the tiny model writes garbage after its first): the first by compare.py's rollout, each later one by a
GRPOTrainer subclass whose `_generate_single_turn` calls `echo` again until `--turns` calls are made, then answers;
TRL's own `_tool_call_loop` runs the tools. Per step: the wall time inside `reset()` and the tools (the same wrapper
on both sides), the part inside the tools, the requests the server saw, and orsgen's calls started ahead
(`orsgen.runtime.calls.totals["started"]`). Medians of steps 2-3 of every run (step 1 pays connections). Prints one
table and writes it into `bench/slow_tools.json`, under its --tool-ms.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import (
    GRPO_BATCH,
    GRPO_GROUP,
    GRPO_STEPS,
    HERE,
    HOST,
    GrpoRun,
    free_port,
    generate,
    grpo_tokenizer,
    run_orsgen,
    run_trl,
    serving,
)

SIDES = {"TRL": None, "orsgen, calls one by one": "0", "orsgen, batch calls": "1"}  # side: ORSGEN_BATCH_CALLS
TASK = re.compile(r"Task \d+: echo (\w+)")


def scripted_trainer(turns: int) -> type:
    """GRPOTrainer whose generation after a tool result is scripted: `echo` the task's word again until the rollout
    has made `turns` calls, then answer with the word. Only `_generate_single_turn` (the generation TRL's tool loop
    asks for after each turn) is replaced: the loop that runs the tools is TRL's own."""
    from trl import GRPOTrainer

    from examples import tiny

    class ScriptedTurns(GRPOTrainer):  # type: ignore[misc]
        def _generate_single_turn(self, prompt_ids: list[list[int]], images: Any, multimodal_fields: Any,
                                  num_generations: int, has_tool_images: bool = False) -> tuple[list[list[int]], None]:
            tok = self.processing_class
            completions = []
            for ids in prompt_ids:
                text = tok.decode(ids)  # prompt, the turns so far and their tool results
                found = TASK.search(text)
                assert found, f"no task prompt in the rollout: {text!r}"
                word, made = found.group(1), text.count("<|tool|>")
                reply = tiny.call_text("echo", {"text": word}) if made < turns else word + "<|eot|>"
                completions.append(tok(reply, add_special_tokens=False)["input_ids"])
            return completions, None  # no logprobs: as the scripted first turn's

    return ScriptedTurns


@contextlib.contextmanager
def variable(name: str, value: str | None) -> Iterator[None]:
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=2, help="trainings per side (the sides' order rotating)")
    p.add_argument("--tool-ms", type=float, default=500, help="each tool call's time on the server (0: none)")
    p.add_argument("--latency-ms", type=float, default=20, help="added to every request")
    p.add_argument("--turns", type=int, default=3, help="tool calls per rollout, one per turn")
    p.add_argument("--json", type=Path, default=HERE / "slow_tools.json")
    args = p.parse_args()
    import datasets  # noqa: F401 - one-time imports, paid by any training process: out of the timings
    import openreward  # noqa: F401
    import trl.experimental.openreward  # noqa: F401

    port = free_port()
    url = f"http://{HOST}:{port}"
    os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = url
    os.environ["BENCH_TOOL_MS"] = str(args.tool_ms)
    settle_s = 0.1 + 3 * args.latency_ms / 1000
    steps: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="orsgen-tools-") as tmp, serving("bench", port, args.latency_ms) as server:
        adapter_path = Path(tmp) / "bench_adapter.py"
        generate(url, adapter_path)
        run = GrpoRun(server, grpo_tokenizer(adapter_path), Path(tmp), GRPO_GROUP, turns=args.turns,
                      trainer_class=scripted_trainer(args.turns))
        names = list(SIDES)
        for r in range(args.runs):
            for side in names[r % 3:] + names[:r % 3]:
                batch_calls = SIDES[side]
                with variable("ORSGEN_BATCH_CALLS", batch_calls):
                    result = (run_trl(run, url, settle_s) if batch_calls is None
                              else run_orsgen(run, adapter_path, True, settle_s))
                steps[side] += result["steps"][1:]
                per_step = ", ".join(f"{s['env_ms']:.0f}" for s in result["steps"])
                ahead = ", ".join(f"{s.get('ahead_calls', 0)}" for s in result["steps"])
                print(f"  {side}, run {r + 1}/{args.runs}: environment ms per step {per_step}"
                      + ("" if batch_calls is None else f"; calls started ahead per step {ahead}"), flush=True)
    rows = {side: summary(found) for side, found in steps.items()}
    base = rows["TRL"]
    commit = runtime_commit()
    print(f"\nGRPOTrainer, {GRPO_STEPS} steps of {GRPO_BATCH} rollouts in groups of {GRPO_GROUP}, {args.turns} tool "
          f"turns of one echo call each; tool calls {args.tool_ms:g} ms on the server, +{args.latency_ms:g} ms per "
          f"request; medians of steps 2-3 of {args.runs} runs per side (orsgen runtime at {commit})\n")
    print("| side | environment ms per step | / TRL | in the tools, ms | / TRL | requests per step "
          "| calls started ahead per step |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for side, row in rows.items():
        ahead = "-" if side == "TRL" else f"{row['calls_ahead']:g}"
        print(f"| {side} | {row['env_ms']:.0f} | {row['env_ms'] / base['env_ms']:.3f} | {row['tool_ms']:.0f} | "
              f"{row['tool_ms'] / base['tool_ms']:.3f} | {row['requests']:g} | {ahead} |")
    found = json.loads(args.json.read_text()) if args.json.exists() else {}
    found[f"tool_ms={args.tool_ms:g}"] = {"tool_ms": args.tool_ms, "latency_ms": args.latency_ms, "turns": args.turns,
                                          "runs": args.runs, "runtime_commit": commit, "rows": rows, "steps": steps}
    args.json.write_text(json.dumps(found, indent=1) + "\n")
    print(f"\nwrote {args.json}")


def runtime_commit() -> str:
    """The last commit of the orsgen package this run imported (its runtime), "+" when its files differ from it."""
    import orsgen

    where = str(Path(orsgen.__file__).resolve().parent)

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", where, *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    found = git("log", "-1", "--format=%h", "--", ".")
    return found + ("+" if found and git("status", "--porcelain", "--", ".") else "") or "?"


def summary(found: list[dict[str, Any]]) -> dict[str, float]:
    def median(key: str) -> float:
        return statistics.median(s.get(key, 0) for s in found)

    return {"env_ms": median("env_ms"), "reset_ms": median("reset_ms"), "tool_ms": median("tool_ms"),
            "step_ms": median("step_ms"), "requests": statistics.median(sum(s["requests"].values()) for s in found),
            "calls_ahead": median("ahead_calls")}


if __name__ == "__main__":
    main()
