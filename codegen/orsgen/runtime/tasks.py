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
    window: int = 1  # groups per step: no task repeats within any `window` consecutive positions


@dataclass(frozen=True)
class Batch:
    """The GRPOTrainer batch a reset is part of: its rows, this rollout's place in it, and where the batch sits."""

    rows: list[Any]
    index: int  # this rollout's position in `rows`
    group: int  # GRPO group size (num_generations, or num_generations_eval)
    stream: str  # "train" or "eval"
    first: int  # the run-wide position of this rank's first rollout, rank-major (the order TRL gathers rewards in)
    groups: int  # groups per step, across ranks

    def slot(self, position: int) -> Slot:
        """The slot of the rollout at `position` of this batch: a group that spans two ranks still gets one task."""
        return Slot(self.stream, (self.first + position) // self.group, self.groups)


_eval_rounds: dict[int, tuple[int, int]] = {}  # id(trainer) -> (evaluation round, its global step)
_lock = threading.Lock()


def batch() -> Batch | None:
    """The batch being reset, read from the GRPOTrainer frame on the stack; None outside a trainer."""
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
    args = trainer.args
    if training:  # generation rounds so far: restored with the global step when a run resumes
        done = trainer.state.global_step * args.gradient_accumulation_steps
        round_ = done // (args.steps_per_generation * trainer.num_iterations)
    else:
        round_ = _eval_round(trainer, index)
    # TRL requires the global batch (world * rows) to be a multiple of the group size
    first = round_ * world * len(inputs) + rank * len(inputs)
    return Batch(list(inputs), index, group, "train" if training else "eval", first, world * len(inputs) // group)


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
    """A seeded shuffle of a split's tasks, reshuffled every epoch; the same on every rank. A step's groups never
    repeat a task across an epoch boundary: the tasks that ended an epoch do not start the next one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epochs: dict[tuple[str, int, str, int], tuple[int, list[int]]] = {}  # the last epoch made, per stream

    def task(self, split: str, size: int, seed: int, at: Slot) -> int:
        epoch, offset = divmod(at.position, size)
        key = (split, seed, at.stream, at.window)
        with self.lock:
            made, order = self.epochs.get(key, (-1, []))
            if made > epoch:  # an earlier epoch again (a resumed or replayed run): made afresh from the first
                made, order = -1, []
            while made < epoch:  # shuffled once per epoch, not at every reset
                made += 1
                order = self._shuffle(size, seed, at.stream, made, order, at.window)
            self.epochs[key] = (made, order)
        return order[offset]

    @staticmethod
    def _shuffle(size: int, seed: int, stream: str, epoch: int, before: list[int], window: int) -> list[int]:
        order = list(range(size))
        random.Random(seed * 1_000_003 + epoch * 2 + (stream != "train")).shuffle(order)
        if before and 1 < window and 2 * (window - 1) <= size:
            ended = set(before[size - (window - 1):])
            early = [t for t in order if t not in ended][: window - 1]
            order = early + [t for t in order if t not in early]
        return order
