"""GRPO with EpisodeMetrics on the metered environment (tests/envs/metered.py), evaluating on its test split.

Training rows are the train split's 4 tasks in order (no shuffle), 2 rollouts each (one GRPO group of 2 per rank
and step); task 3's row carries a pinned prompt that is stale by the time it runs (its adapter opens in the
background, so the live prompt is compared). Evaluation: the test split's 2 tasks every 2 steps. At each optimizer
step's end the worker notes how many requests the server had logged, so a test can cut the server's log into steps.

As a torchrun worker: `python -m torch.distributed.run --nproc_per_node 2 ... -m tests.harness.metered MODULE_PATH
OUT_DIR URL [TRAJECTORIES_DIR]` prints one `{"rank": ..., "log_history": [...], "marks": [...]}` line per rank; with
TRAJECTORIES_DIR, each rank also records its episodes there (`Trajectories`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tests.harness import emit

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

STALE = "Answer task 3 (session 0)"  # what was pinned: the server's sessions count from 1


def adapter_class(module: Any) -> type:
    return type("Metered", (module.Metered,), {"open_in_background": True, "start_retries": 1})


def train(module: Any, out_dir: str, url: str, steps: int, trajectories: str | None = None) -> tuple[Any, list[int]]:
    """(the trained trainer, the server's log length at each optimizer step's end)."""
    from transformers import TrainerCallback

    from examples import tiny
    from examples.tiny import tool_methods
    from tests.harness import servers, trainers

    rows = module.dataset()
    rows = rows.add_column("task_prompt", [STALE if i == 3 else None for i in rows["task_index"]])
    marks: list[int] = []

    class Marks(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            marks.append(len(servers.Served(url, None).log()))  # type: ignore[arg-type]

    env_class = adapter_class(module)
    trainer = trainers.trainer(
        env_class, out_dir, steps, threads=1, tools=tool_methods(env_class()),
        conversations=[tiny.conversation("Answer task 0", "answer", {}, "answered")], train_dataset=rows,
        eval_dataset=module.dataset(split="test"), first_turn=lambda i, prompt: tiny.call_text("answer", {}),
        callbacks=[module.EpisodeMetrics(), Marks(), *([module.Trajectories(trajectories)] if trajectories else [])],
        per_device_train_batch_size=2, num_generations=2,
        per_device_eval_batch_size=2, eval_strategy="steps", eval_steps=2,
    )
    trainer.train()
    module.close_all()
    return trainer, marks


def main(module_path: str, out_dir: str, url: str, trajectories: str | None = None) -> None:
    from tests.harness.generation import load as load_module

    module = load_module(Path(module_path))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    trainer, marks = train(module, out_dir, url, steps=4 // world, trajectories=trajectories)
    emit({"rank": int(os.environ.get("RANK", "0")), "log_history": trainer.state.log_history,
                      "marks": marks})


if __name__ == "__main__":
    main(*sys.argv[1:5])
