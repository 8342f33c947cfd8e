"""Which task a `reset()` without `task_index` opens, when the environment owns the data (no `train_dataset`).

TRL's placeholder rows do not say which GRPO group a rollout belongs to, so the task is derived from where the
rollout sits in the trainer's generation batch: (step, rank, position) -> group -> a seeded shuffle of the split.
Nothing is counted per process, so ranks agree, a reset made outside training shifts nothing, and a resumed run
continues where its global step says. A mode that cannot say where a rollout sits is refused.
"""

from __future__ import annotations

import random
import sys
import threading
from dataclasses import dataclass
from typing import Any

REFUSED = (
    "reset() without task_index is only possible inside GRPOTrainer's generation loop (it is called from "
    "{where}, where a rollout's GRPO group cannot be known): pass train_dataset=dataset() so every row carries "
    "task_index"
)


@dataclass(frozen=True)
class Slot:
    """Where a rollout sits: the `position`-th group of the run's task stream `stream` ("train" or "eval")."""

    stream: str
    position: int


_eval_rounds: dict[int, tuple[int, int]] = {}  # id(trainer) -> (evaluation round, its global step)
_lock = threading.Lock()


def slot() -> Slot | None:
    """The slot of the rollout being reset, read from the GRPOTrainer frame on the stack; None outside a trainer."""
    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "_generate_and_score_completions":
        frame = frame.f_back
    if frame is None:
        return None
    trainer, local = frame.f_locals.get("self"), frame.f_locals
    index, inputs = local.get("i"), local.get("inputs")
    if trainer is None or not isinstance(index, int) or inputs is None:
        return None
    training = local.get("mode", "train") == "train"
    group = trainer.num_generations if training else trainer.num_generations_eval
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    per_round = world * len(inputs) // group  # TRL requires the global batch to be a multiple of the group size
    position = (rank * len(inputs) + index) // group  # rank-major: the order TRL gathers rewards in
    args = trainer.args
    if training:  # generation rounds so far: restored with the global step when a run resumes
        done = trainer.state.global_step * args.gradient_accumulation_steps
        round_ = done // (args.steps_per_generation * trainer.num_iterations)
    else:
        round_ = _eval_round(trainer, index)
    return Slot("train" if training else "eval", round_ * per_round + position)


def _eval_round(trainer: Any, index: int) -> int:
    """The batch number within the current evaluation pass: every pass evaluates the same tasks, so passes compare."""
    with _lock:
        key = id(trainer)
        round_, step = _eval_rounds.get(key, (-1, -1))
        if index == 0:
            round_ = round_ + 1 if step == trainer.state.global_step else 0
            _eval_rounds[key] = (round_, trainer.state.global_step)
        return max(round_, 0)


class Order:
    """A seeded shuffle of a split's tasks, reshuffled every epoch; the same on every rank."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cache: dict[tuple[str, int, str, int], list[int]] = {}

    def task(self, split: str, size: int, seed: int, at: Slot) -> int:
        epoch, offset = divmod(at.position, size)
        key = (split, seed, at.stream, epoch)
        with self.lock:
            order = self.cache.get(key)
            if order is None:  # shuffled once per epoch, not at every reset
                order = list(range(size))
                stream = 0 if at.stream == "train" else 1
                random.Random(seed * 1_000_003 + epoch * 2 + stream).shuffle(order)
                self.cache = {k: v for k, v in self.cache.items() if k[:3] != key[:3]}  # keep one epoch per stream
                self.cache[key] = order
        return order[offset]
