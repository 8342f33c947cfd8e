"""Which task a `reset()` without `task_index` opens, when the environment owns the data (no `train_dataset`).

TRL's placeholder rows do not say which GRPO group a rollout belongs to, so the task is derived from where the
rollout sits in the trainer's generation batch (`trl.place`): (generation round, rank, position) -> group -> a seeded
shuffle of the split. Rounds are counted per trainer, one per batch (`trl._round`): each rank counts its own batches
and ranks generate in lockstep, so they agree; a reset made outside training, an evaluation pass or another trainer
shifts nothing, and a resumed run continues from its global step. An evaluation pass numbers its batches from 0, so
every pass gets the same tasks.
"""

from __future__ import annotations

import random
import threading

from orsgen.runtime.trl import Slot


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
