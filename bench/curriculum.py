"""The difficulty-aware task order against the seeded shuffle (issue 33), side by side in one run: a real GRPOTrainer
with no dataset on the coins environment (tests/envs/coins.py: 12 tasks; 4 always pay 1, 4 never, 4 by a coin per
rollout seeded with the rollout's step, rank and place), the tiny model and one scripted `flip` call per rollout,
`--steps` (60) steps of 16 rollouts in groups of 8 (2 groups a step), `open_ahead="next-step"`, once per order and
task seed (`--runs` seeds, the orders alternating), against one loopback server, in one process.

    python bench/curriculum.py [--runs 2] [--steps 60]

Per side: the fraction of GRPO groups whose rewards did not spread, over the whole run and after the first pass
(from step 7: the difficulty order has drawn every task and measured them by then), counted twice: from each
rollout's pay (recomputed from its task and seed, as the environment pays it) and as EpisodeMetrics logged it
(`orsgen/groups_zero_spread`), with TRL's own `frac_reward_zero_std` beside; the wall time per step. For the difficulty
order: its draws per pool after the first pass (`orsgen/draws/...`) against what the pools' weights give at each
step's pool sizes (`orsgen/pool/...`): (1 - floor) x weight / the weights of the pools holding a task, plus floor x
the pool's share of the tasks. Goal: the shuffle's fraction (about two thirds on this mix) falls to at most a quarter,
and every pool's share of the draws is within 3 standard errors (binomial) of its expected share. Prints one table and
writes bench/curriculum.json.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # tests.harness and tests.envs (the coins environment), examples
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from slow_tools import runtime_commit

from tests.harness import coins, servers
from tests.harness.generation import in_process, load

GOAL = 0.25  # the difficulty order's fraction of groups with no reward spread, at most
PER_DEVICE, GROUP = 16, 8
FIRST_PASS = 7  # steps before every task is drawn (rounds 0-5) and measured in the pools round 7 draws from
ORDERS = ("shuffle", "difficulty")
POOLS = ("normal", "hard", "easy")


def one_run(module: Any, order: str, seed: int, steps: int, out: Path) -> dict[str, Any]:
    env_class = coins.adapter_class(module, order, task_seed=seed, open_ahead="next-step")
    trainer = coins.train(module, env_class, str(out), steps, callbacks=[module.EpisodeMetrics()],
                          per_device_train_batch_size=PER_DEVICE, num_generations=GROUP)
    began = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - began
    module.close_all()
    groups = coins.groups(env_class.resets, PER_DEVICE, GROUP)
    logged = [e for e in trainer.state.log_history if "orsgen/episodes" in e]
    assert len(logged) == steps, len(logged)
    flat = [len(set(g["rewards"])) == 1 for g in groups]
    late = [f for f, g in zip(flat, groups, strict=True) if g["step"] >= FIRST_PASS]
    return {
        "order": order, "seed": seed, "steps": steps, "seconds": seconds,
        "tasks": [g["task"] for g in groups],
        "zero_spread": sum(flat) / len(flat), "zero_spread_after_first_pass": sum(late) / len(late),
        "zero_spread_logged": statistics.fmean(e["orsgen/groups_zero_spread"] for e in logged),
        "trl_frac_reward_zero_std": statistics.fmean(e["frac_reward_zero_std"] for e in logged),
        "figures": [{k[len("orsgen/"):]: v for k, v in e.items() if k.startswith(("orsgen/pool/", "orsgen/draws/"))}
                    for e in logged],
    }


def frequencies(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The difficulty runs' draws per pool after the first pass, against the shares the weights give."""
    from orsgen.runtime.settings import POOLS as DEFAULTS

    drawn: collections.Counter[str] = collections.Counter()
    expected: collections.Counter[str] = collections.Counter()
    for run in runs:
        for step, row in enumerate(run["figures"]):
            if step < FIRST_PASS or row["pool/unseen"] or row["draws/unseen"]:
                continue
            draws = sum(row[f"draws/{pool}"] for pool in POOLS)
            sizes = {pool: row[f"pool/{pool}"] for pool in POOLS}
            weights = {pool: DEFAULTS[pool] if sizes[pool] else 0.0 for pool in POOLS}
            for pool in POOLS:
                share = ((1 - DEFAULTS["floor"]) * weights[pool] / sum(weights.values())
                         + DEFAULTS["floor"] * sizes[pool] / sum(sizes.values()))
                expected[pool] += share * draws
                drawn[pool] += row[f"draws/{pool}"]
    total = sum(drawn.values())
    found = {}
    for pool in POOLS:
        share, want = drawn[pool] / total, expected[pool] / total
        error = math.sqrt(want * (1 - want) / total)
        found[pool] = {"draws": round(drawn[pool]), "share": share, "expected": want, "standard_error": error,
                       "within_3_se": abs(share - want) <= 3 * error}
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=2, help="task seeds (0, 1, ...), each trained with both orders")
    p.add_argument("--steps", type=int, default=60, help="optimizer steps per training (one generation round each)")
    p.add_argument("--json", type=Path, default=HERE / "curriculum.json")
    args = p.parse_args()
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="orsgen-curriculum-") as tmp, \
            servers.running("tests.envs.coins:Coins") as server:
        path = Path(tmp) / "coins_bench.py"
        assert in_process(server.url, "-o", str(path)).returncode == 0
        module = load(path)
        for seed in range(args.runs):
            for order in ORDERS if seed % 2 == 0 else ORDERS[::-1]:
                run = one_run(module, order, seed, args.steps, Path(tmp) / f"{order}-{seed}")
                runs.append(run)
                print(f"  {order}, task_seed {seed}: {run['zero_spread']:.3f} of groups with no reward spread "
                      f"({run['zero_spread_after_first_pass']:.3f} after the first pass), "
                      f"{run['seconds'] / args.steps:.2f} s per step", flush=True)
    rows = {}
    for order in ORDERS:
        mine = [r for r in runs if r["order"] == order]
        rows[order] = {key: statistics.fmean(r[key] for r in mine) for key in (
            "zero_spread", "zero_spread_after_first_pass", "zero_spread_logged", "trl_frac_reward_zero_std")}
        rows[order]["seconds_per_step"] = statistics.fmean(r["seconds"] / r["steps"] for r in mine)
    pools = frequencies([r for r in runs if r["order"] == "difficulty"])
    met = rows["difficulty"]["zero_spread"] <= GOAL and all(p["within_3_se"] for p in pools.values())

    print(f"\nGRPOTrainer, no dataset, {args.steps} steps of {PER_DEVICE} rollouts in groups of {GROUP} on the coins "
          f"environment (4 tasks always pay, 4 never, 4 by a coin), {args.runs} task seeds per order:\n")
    print("| task order | groups with no reward spread | after the first pass | as logged (orsgen/groups_zero_spread) "
          "| TRL frac_reward_zero_std | s per step |")
    print("|---|---:|---:|---:|---:|---:|")
    for order, row in rows.items():
        print(f"| `{order}` | {row['zero_spread']:.3f} | {row['zero_spread_after_first_pass']:.3f} | "
              f"{row['zero_spread_logged']:.3f} | {row['trl_frac_reward_zero_std']:.3f} | "
              f"{row['seconds_per_step']:.2f} |")
    print("\n| pool (`difficulty`, after the first pass) | draws | share | expected | standard error | within 3 |")
    print("|---|---:|---:|---:|---:|---|")
    for pool, row in pools.items():
        print(f"| {pool} | {row['draws']} | {row['share']:.3f} | {row['expected']:.3f} | {row['standard_error']:.3f} "
              f"| {'yes' if row['within_3_se'] else 'NO'} |")
    print(f"\ngoal (at most {GOAL} of groups with no spread, every pool within 3 standard errors): "
          f"{'met' if met else 'NOT met'}")
    found = {"meta": {"steps": args.steps, "runs": args.runs, "per_device": PER_DEVICE, "group": GROUP,
                      "first_pass_steps": FIRST_PASS, "goal": GOAL, "met": met, "cpus": os.cpu_count(),
                      "python": platform.python_version(), "platform": platform.platform(),
                      "runtime_commit": runtime_commit(), "date": datetime.date.today().isoformat(),
                      "load_average_before": load_before, "load_average_after": os.getloadavg()},
             "orders": rows, "pools": pools,
             "runs": [{k: v for k, v in r.items() if k != "figures"} for r in runs]}
    args.json.write_text(json.dumps(found, indent=1) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
