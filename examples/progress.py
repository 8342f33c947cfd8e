"""What the quickstart and the demo say while GRPOTrainer trains: a line as each step starts and ends, and one every
few seconds within a step (the episodes started and ended, the tool calls made so far), counted by the runtime's
hooks; TRL's own printed log dicts are taken out (each script prints the figures it means).

    trainer = GRPOTrainer(...)
    with Progress(trainer):
        trainer.train()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Self

from orsgen.runtime import hooks
from transformers import PrinterCallback, ProgressCallback, TrainerCallback

EVERY = 3.0  # seconds between lines within a step


class Progress(TrainerCallback):  # type: ignore[misc]
    def __init__(self, trainer: Any, say: Callable[[str], None] = print, every: float = EVERY) -> None:
        self.trainer, self.say, self.every = trainer, say, every
        self.counts = {"started": 0, "calls": 0, "ended": 0}
        self.step, self.began = 0, time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def __enter__(self) -> Self:
        for quiet in (PrinterCallback, ProgressCallback):  # TRL's log dicts, printed at every log and at the end
            self.trainer.remove_callback(quiet)
        self.trainer.add_callback(self)
        for event in ("episode_start", "tool_call", "episode_end"):
            hooks.add(event, self.heard)
        threading.Thread(target=self.tick, name="progress", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for event in ("episode_start", "tool_call", "episode_end"):
            hooks.remove(event, self.heard)
        self.trainer.remove_callback(self)

    def heard(self, record: Any) -> None:
        key = {hooks.EpisodeStart: "started", hooks.ToolCall: "calls"}.get(type(record), "ended")
        with self.lock:
            self.counts[key] += 1

    def tick(self) -> None:
        while not self.stop.wait(self.every):
            if self.step:
                with self.lock:
                    counts = dict(self.counts)
                self.say(f"      step {self.step}: {time.monotonic() - self.began:.0f} s, {counts['started']} episodes "
                         f"started, {counts['calls']} tool calls, {counts['ended']} episodes ended")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        with self.lock:
            self.counts = dict.fromkeys(self.counts, 0)
            self.step, self.began = state.global_step + 1, time.monotonic()
        self.say(f"      step {self.step} of {state.max_steps}: the rollouts, against the live environment")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.say(f"      step {self.step} done in {time.monotonic() - self.began:.0f} s")
        self.step = 0
