"""The one base of the runtime's trainer callbacks (`Callback`): a TrainerCallback gets no trainer, so this one finds
the trainer calling it (`trainer()`, read up the stack at its first event, then held weakly). `Calls` is one made of
functions. This module imports transformers: only the callbacks' modules import it, when they are used."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from orsgen.runtime.trl.trainer import trainer_of


class Callback(TrainerCallback):  # type: ignore[misc]
    """A trainer callback that knows its trainer: found at `on_init_end` (or `on_train_begin`, for one added after
    the trainer was built), or at the first `trainer()` from inside one of the trainer's calls; `found(trainer)` runs
    then (a subclass's attach)."""

    _trainer: weakref.ref[Any] | None = None

    def trainer(self) -> Any | None:
        """The trainer calling this callback (None: none calls it, or it is gone)."""
        found = self._trainer() if self._trainer is not None else None
        if found is None:
            found = trainer_of(self, sys._getframe(1))
            self._trainer = weakref.ref(found) if found is not None else None
            if found is not None:
                self.found(found)
        return found

    def found(self, trainer: Any) -> None:
        """The trainer was found (each time another one is)."""

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer()  # a callback added after the trainer was built (trainer.add_callback)


class Calls(Callback):
    """Calls the functions given at a step's end, a checkpoint's save and training's end (added by the runtime to a
    trainer its resets are placed in)."""

    def __init__(self, step_end: Callable[[], None] | None = None, save: Callable[[Any, Any], None] | None = None,
                 train_end: Callable[[], None] | None = None) -> None:
        self._step_end, self._save, self._train_end = step_end, save, train_end

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._step_end is not None:
            self._step_end()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._save is not None:
            self._save(args, state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._train_end is not None:
            self._train_end()
