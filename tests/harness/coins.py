"""GRPO with no dataset on the coins environment (tests/envs/coins.py: a reward that depends only on the task), for
the difficulty-aware task order's tests and benchmark (bench/curriculum.py).

The scripted first turn calls `flip` with a seed unique to the rollout (`seed_of`: its global step, rank and place in
the rank's batch), so what each rollout was paid follows from its task alone (`tests.envs.coins.pays`), and a rerun,
or a resumed run, pays the same. `adapter_class` gives a subclass with the task order set whose resets are recorded
(`owned_data.tracking`), `train` the trainer, `groups` the GRPO groups of the recorded resets with their rewards.

As a torchrun worker: `python -m torch.distributed.run --nproc_per_node 2 ... -m tests.harness.coins MODULE_PATH
OUT_DIR STEPS PER_DEVICE GROUP ORDER` prints one `{"reset": {...}}` line per reset and a final `{"rank": ...}` line
with the trainer's log_history.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from examples import tiny
from tests.envs.coins import pays
from tests.harness import emit, owned_data, trainers
from tests.harness.generation import load

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONVERSATION = ("Task 0: flip the coin", "flip", {"seed": 12}, "heads")


def seed_of(step: int, rank: int, position: int, per_device: int) -> int:
    """The seed the scripted model flips with: one per rollout of a run (up to 64 ranks)."""
    return (step * 64 + rank) * per_device + position


def rollouts(prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
    """A `rollout_func` whose first turn is `flip(seed_of(...))`."""
    step, rank = trainer.state.global_step, trainer.accelerator.process_index

    def first_turn(i: int, prompt: str) -> str:
        return tiny.call_text("flip", {"seed": seed_of(step, rank, i, len(prompts))})

    return tiny.scripted_rollouts(first_turn)(prompts, trainer)


def adapter_class(module: Any, order: str = "difficulty", echo: bool = False, **attributes: Any) -> type:
    """The module's Coins adapter with `task_order = order` (and `attributes`), its resets recorded."""
    tracked = owned_data.tracking(module.Coins, echo=echo)
    tracked.task_order = order
    for name, value in attributes.items():
        setattr(tracked, name, value)
    return tracked


def train(module: Any, env_class: type, out_dir: str, steps: int, callbacks: Sequence[Any] = (), **config: Any) -> Any:
    """A GRPOTrainer with no train_dataset on `env_class` (the tiny model, the scripted flips); `env_class.trainer`
    is set to it."""
    built = trainers.trainer(env_class, out_dir, steps, tools=trainers.tool_methods(module.Coins()),
                             conversations=[tiny.conversation(*CONVERSATION)], rollout_func=rollouts,
                             callbacks=callbacks, **{"threads": 1, **config})
    env_class.trainer = built
    return built


def groups(resets: list[dict[str, Any]], per_device: int, group: int, world: int = 1) -> list[dict[str, Any]]:
    """The GRPO groups of the recorded resets, in order: {"step", "task", "rewards"} (each rollout's pay from its
    task and seed), checking that a group's rollouts share their task and every (step, rank, position) reset once."""
    where = {(r["step"], r["rank"], r["position"]): r["task_index"] for r in resets}
    assert len(where) == len(resets), "a rollout reset twice"
    steps = sorted({r["step"] for r in resets})
    found = []
    for step in steps:
        batch = [(rank, p) for rank in range(world) for p in range(per_device)]  # rank-major, as TRL gathers
        for k in range(0, len(batch), group):
            members = batch[k:k + group]
            tasks = {where[(step, rank, p)] for rank, p in members}
            assert len(tasks) == 1, (step, members, tasks)  # a group never mixes tasks, across ranks too
            task = tasks.pop()
            found.append({"step": step, "task": task,
                          "rewards": [pays(task, seed_of(step, rank, p, per_device)) for rank, p in members]})
    return found


def main(module_path: str, out_dir: str, steps: str, per_device: str, group: str, order: str) -> None:
    module = load(Path(module_path))
    env_class = adapter_class(module, order, echo=True)
    run = train(module, env_class, out_dir, int(steps), callbacks=[module.EpisodeMetrics()],
                per_device_train_batch_size=int(per_device), num_generations=int(group))
    run.train()
    module.close_all()
    emit({"rank": int(os.environ.get("RANK", "0")), "steps": run.state.global_step,
          "log_history": run.state.log_history})


if __name__ == "__main__":
    main(*sys.argv[1:7])
