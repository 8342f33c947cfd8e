"""What the runtime reads of a trainer outside its batches: its stream, its window of figures, its ranks, where its
rollouts run, the callback calling (`trainer_of`), the checkpoint its train() call resumed from (see the package's
docstring for what is assumed). The callbacks themselves derive from `callback.Callback` (it imports transformers)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from orsgen.runtime.trl.stack import find, owner


def training(trainer: Any | None) -> str:
    """The stream the trainer is in, as TRL decides it: "eval" when its model is not training."""
    return "train" if getattr(getattr(trainer, "model", None), "training", True) else "eval"


def metrics_window(trainer: Any, mode: str) -> dict[str, list[float]] | None:
    """The trainer's window of figures for `mode` (`_metrics[mode]`: lists of values per name, which `log()`
    averages and clears), None when it keeps none."""
    found = getattr(trainer, "_metrics", None)
    return found[mode] if isinstance(found, dict) and isinstance(found.get(mode), dict) else None


def gather(trainer: Any, value: Any) -> list[Any]:
    """`value` of every rank, in rank order (one process: [value]); a collective, so every rank calls it."""
    if trainer.accelerator.num_processes == 1:
        return [value]
    from accelerate.utils import gather_object

    return list(gather_object([value]))


def rollouts_elsewhere(trainer: Any) -> bool:
    """The trainer's environments live in another process (AsyncGRPOTrainer's rollout worker)."""
    return hasattr(trainer, "rollout_worker")


def trainer_of(callback: Any, start: Any = None) -> Any | None:
    """The trainer calling `callback` (a TrainerCallback gets no trainer): the first `self` up the stack (from
    `start`, else the caller's frame) whose callback handler holds it. EpisodeMetrics writes into that trainer's
    `_metrics[mode]`, the window of figures GRPOTrainer and AsyncGRPOTrainer gather, average over the logging window
    and log (with "eval_" in evaluation)."""
    def calls(frame: Any) -> bool:
        handler = getattr(owner(frame), "callback_handler", None)
        return any(c is callback for c in getattr(handler, "callbacks", ()))

    found = find(start if start is not None else sys._getframe(1), calls)
    return None if found is None else owner(found)


def resumed_from(trainer: Any) -> str | None:
    """The checkpoint folder the trainer's running train() call resumed from (see the package's docstring), None
    when it began afresh or the loop is not on the stack."""
    found = find(sys._getframe(1), lambda f: f.f_code.co_name == "_inner_training_loop" and owner(f) is trainer)
    checkpoint = None if found is None else found.f_locals.get("resume_from_checkpoint")
    return str(checkpoint) if isinstance(checkpoint, str | os.PathLike) else None


def on_training_end(trainer: Any, call: Callable[[], None]) -> None:
    """Call `call()` when `trainer`'s training ends: a callback on its handler, holding nothing of the trainer."""
    from orsgen.runtime.trl.callback import Calls

    trainer.add_callback(Calls(train_end=call))
