"""Sandboxes that start slowly: a real GRPOTrainer on both sides against the bench environment with every session
start taking `--start-ms` (1 s) and every request `--latency-ms` (20 ms) more, in one run.

    python bench/slow_starts.py [--runs 2] [--start-ms 1000] [--latency-ms 20]

Sides: TRL's `OpenRewardSpec` (its dataset, factory and reward); orsgen with `train_dataset=dataset(...)` (a batch's
first reset opens the whole batch); orsgen with the environment owning the data and `open_ahead="next-step"` (the
next step's sessions open while this step runs). Per step: the wall time inside `reset()` and the tool, the starts
paid in line (time inside `reset()` / one start), sessions opened ahead, taken and unused. Medians of steps 2-3 of
every run (step 1 pays connections, and orsgen's look-ahead has no step before it). `--generate-ms` adds a model's
generation time to each step (the tiny model's is next to nothing), which the next step's starts can open behind.
Prints one table and writes it into `bench/slow_starts.json`, under its --generate-ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare
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

SIDES = {"TRL": None, "orsgen, dataset": (True, False), "orsgen, no dataset, next-step": ("next-step", True)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=2, help="trainings per side (the sides' order rotating)")
    p.add_argument("--start-ms", type=float, default=1000, help="each session's start")
    p.add_argument("--latency-ms", type=float, default=20, help="added to every request")
    p.add_argument("--generate-ms", type=float, default=0, help="model time per step (the tiny model's is next to "
                   "nothing; a real model's takes seconds): what the next step's starts can hide behind")
    p.add_argument("--json", type=Path, default=HERE / "slow_starts.json")
    args = p.parse_args()
    compare.GENERATE_S = args.generate_ms / 1000
    import datasets  # noqa: F401 - one-time imports, paid by any training process: out of the timings
    import openreward  # noqa: F401
    import trl.experimental.openreward  # noqa: F401

    port = free_port()
    url = f"http://{HOST}:{port}"
    os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = url
    os.environ["BENCH_START_MS"] = str(args.start_ms)
    settle_s = 0.1 + 3 * args.latency_ms / 1000
    steps: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="orsgen-slow-") as tmp, serving("bench", port, args.latency_ms) as server:
        adapter_path = Path(tmp) / "bench_adapter.py"
        generate(url, adapter_path)
        run = GrpoRun(server, grpo_tokenizer(adapter_path), Path(tmp), GRPO_GROUP)
        names = list(SIDES)
        for r in range(args.runs):
            for side in names[r % 3:] + names[:r % 3]:
                mode = SIDES[side]
                result = (run_trl(run, url, settle_s) if mode is None
                          else run_orsgen(run, adapter_path, mode[0], settle_s, owned=mode[1]))
                steps[side] += result["steps"][1:]
                per_step = ", ".join(f"{s['env_ms']:.0f}" for s in result["steps"])
                print(f"  {side}, run {r + 1}/{args.runs}: environment ms per step {per_step}", flush=True)
    rows = {side: summary(found, args.start_ms) for side, found in steps.items()}
    trl_ms = rows["TRL"]["env_ms"]
    print(f"\nGRPOTrainer, {GRPO_STEPS} steps of {GRPO_BATCH} rollouts in groups of {GRPO_GROUP}, one echo call each; "
          f"session starts {args.start_ms:g} ms, +{args.latency_ms:g} ms per request, model time "
          f"{args.generate_ms:g} ms per step; medians of steps 2-3 of {args.runs} runs per side\n")
    print("| side | environment ms per step | / TRL | starts in line per step | opened ahead / taken / unused |")
    print("|---|---:|---:|---:|---|")
    for side, row in rows.items():
        ahead = "-" if side == "TRL" else f"{row['opened']:g} / {row['taken']:g} / {row['unused']:g}"
        print(f"| {side} | {row['env_ms']:.0f} | {row['env_ms'] / trl_ms:.3f} | {row['in_line']:.1f} | {ahead} |")
    found = json.loads(args.json.read_text()) if args.json.exists() else {}
    found[f"generate_ms={args.generate_ms:g}"] = {"start_ms": args.start_ms, "latency_ms": args.latency_ms,
                                                  "runs": args.runs, "rows": rows, "steps": steps}
    args.json.write_text(json.dumps(found, indent=1) + "\n")
    print(f"\nwrote {args.json}")


def summary(found: list[dict[str, Any]], start_ms: float) -> dict[str, float]:
    def median(key: str) -> float:
        return statistics.median(s.get(key, 0) for s in found)

    return {"env_ms": median("env_ms"), "reset_ms": median("reset_ms"), "in_line": median("reset_ms") / start_ms,
            "opened": median("ahead_opened"), "taken": median("ahead_taken"), "unused": median("ahead_unused")}


if __name__ == "__main__":
    main()
