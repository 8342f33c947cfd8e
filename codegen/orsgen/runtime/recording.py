"""Trajectory records of a training run: ``GRPOTrainer(..., callbacks=[Trajectories("runs/seta")])``.

The records are trajectories.py, their writer recorder.py; this callback gives them the trainer's run name, step and rank,
and reaches AsyncGRPOTrainer's spawned rollout worker through `ORSGEN_TRAJECTORIES` (set here, before the trainer
starts it: a spawned process inherits the environment), where the episodes run.
"""

from __future__ import annotations

import os
import weakref
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from orsgen.runtime.recorder import Recorder, adopt, from_environment
from orsgen.runtime.trajectories import MAX_RESULT_CHARS
from orsgen.runtime.trl.callback import Callback


class Trajectories(Callback):
    """Writes one JSON line per episode (docs/reference.md: "Trajectory records") to
    ``directory/trajectories-rank{R}.jsonl``, one file per rank, for training and evaluation (``stream``).
    ``upload=True`` also sends each episode to the OpenReward runs page (its API key: ``OPENREWARD_API_KEY``).
    ``max_result_chars`` caps each tool result in the record (None: no cap). ``path`` is this rank's file."""

    def __init__(self, directory: str | os.PathLike[str], *, upload: bool = False,
                 max_result_chars: int | None = MAX_RESULT_CHARS, run: str | None = None) -> None:
        found = from_environment()  # ORSGEN_TRAJECTORIES set by hand, or by an earlier callback in this process
        if found is not None and found.directory == Path(directory).resolve() and not found.closed:
            self.recorder = found
        else:
            self.recorder = Recorder(directory, max_result_chars=max_result_chars, upload=upload, run=run)
            # its trainer gone, its recorder stops listening (at exit the exit's steps write and close it instead)
            weakref.finalize(self, self.recorder.retire).atexit = False
        adopt(self.recorder)  # this process's, and ORSGEN_TRAJECTORIES for the processes it starts

    @property
    def path(self) -> Path:
        return self.recorder.path

    def found(self, trainer: Any) -> None:
        ref = weakref.ref(trainer)

        def step() -> int | None:
            found = ref()
            return None if found is None else int(found.state.global_step)

        def rank() -> int:
            found = ref()
            return int(found.accelerator.process_index) if found is not None else 0

        self.recorder.attach(run=_run_name(trainer), step=step, rank=rank, run_info=_run_info(trainer),
                             trainer=trainer)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self.trainer()  # a callback added after the trainer was built (trainer.add_callback)
        if trainer is not None:
            self.found(trainer)  # again: a resumed run's initial step is known now

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.flush()  # evaluation may follow: the file stays open; exit closes it

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued and close the file (and the upload): at exit by itself."""
        self.recorder.close(timeout)


def _run_name(trainer: Any) -> str | None:
    args = getattr(trainer, "args", None)
    name = getattr(args, "run_name", None)
    output_dir = getattr(args, "output_dir", None)
    if not name and output_dir:
        name = Path(str(output_dir)).name
    return str(name) if name else None


def _run_info(trainer: Any) -> dict[str, Any]:
    """RunInfo fields (openreward.models.RunInfo) the trainer knows."""
    args = getattr(trainer, "args", None)
    model = getattr(getattr(trainer, "model", None), "config", None)
    try:
        framework_version = version("trl")
    except PackageNotFoundError:
        framework_version = None
    world = getattr(getattr(trainer, "accelerator", None), "num_processes", 1) or 1
    info = {
        "model_name": str(getattr(model, "_name_or_path", "") or type(getattr(trainer, "model", None)).__name__),
        "run_type": "train", "training_stage": "rl", "rl_algorithm": "grpo", "framework": "trl",
        "framework_version": framework_version, "lr": getattr(args, "learning_rate", None),
        "batch_size": (getattr(args, "per_device_train_batch_size", 0) or 0) * world or None,
        "optimizer": str(getattr(getattr(args, "optim", None), "value", "") or "") or None, "initial_step": int(trainer.state.global_step),
    }
    return {k: v for k, v in info.items() if v is not None}

