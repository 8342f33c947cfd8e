"""GRPO with the environment owning the data (no `train_dataset`), recording which task every reset opened.

`tracking(adapter_class)` gives a subclass that records, per `reset()` (the episode_start hook), where the trainer had
the rollout (global step, rank, position in the rank's batch) read from the trainer itself (not from the runtime's own
bookkeeping), the task index the adapter chose and the session id the server got, so a test can match it to the
server's log.

As a torchrun worker: `python -m torch.distributed.run --nproc_per_node 2 ... -m tests.harness.owned_data
MODULE_PATH OUT_DIR STEPS PER_DEVICE NUM_GENERATIONS` prints one `{"reset": {...}}` line per reset and a final
`{"rank": ...}` line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, ClassVar

from orsgen.runtime import episode_of

from tests.harness import emit, trainers
from tests.harness.generation import load

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tracking(adapter_class: type, echo: bool = False) -> type:
    """A subclass whose resets are recorded in `Tracking.resets` through the runtime's episode_start hook (and printed
    as JSON lines when `echo`)."""
    from orsgen.runtime import hooks

    class Tracking(adapter_class):  # type: ignore[misc, valid-type]
        trainer: ClassVar[Any] = None  # set once the trainer is built
        resets: ClassVar[list[dict[str, Any]]] = []

    def record(start: hooks.EpisodeStart) -> None:
        adapter, trainer = start.adapter, Tracking.trainer
        step = position = None
        if trainer is not None:
            step = trainer.state.global_step
            position = next((i for i, env in enumerate(trainer.environments) if env is adapter), None)
        record = {
            "step": step,
            "rank": int(os.environ.get("RANK", "0")),
            "position": position,
            "task_index": start.task_index,
            "session": getattr(episode_of(adapter).session, "sid", None),
            "prompt": start.prompt,
        }
        Tracking.resets.append(record)
        if echo:
            emit({"reset": record})

    hooks.add("episode_start", record, Tracking)
    Tracking.__name__ = Tracking.__qualname__ = adapter_class.__name__
    return Tracking


def trainer(module: Any, env_class: type, out_dir: str, steps: int, **config: Any) -> Any:
    """A GRPOTrainer with no train_dataset (the environment owns the data), the tiny model and the scripted echo;
    `env_class.trainer` is set to it, so the records say where the trainer had each rollout."""
    built = trainers.trainer(env_class, out_dir, steps, tools=trainers.tool_methods(module.Echo()), **config)
    env_class.trainer = built
    return built


def main(module_path: str, out_dir: str, steps: str, per_device: str, num_generations: str) -> None:
    module = load(Path(module_path))
    env_class = tracking(module.Echo, echo=True)
    run = trainer(module, env_class, out_dir, int(steps), threads=1, per_device_train_batch_size=int(per_device),
                  num_generations=int(num_generations))
    run.train()
    module.close_all()
    from orsgen.runtime import open_sessions

    emit({"rank": int(os.environ.get("RANK", "0")), "open_sessions": open_sessions(),
                      "steps": run.state.global_step, "resets": len(env_class.resets),
                      "ahead": {k: getattr(module.PINNED.ahead, k) for k in ("opened", "taken", "unused")}})


if __name__ == "__main__":
    main(*sys.argv[1:6])
