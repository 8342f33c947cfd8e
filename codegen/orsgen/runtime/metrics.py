"""Episode metrics in the trainer's own logs: ``GRPOTrainer(..., callbacks=[EpisodeMetrics()])``.

Built on the hooks (hooks.py). At each optimizer step's end (and after each evaluation batch) the figures since the
last one are gathered from every rank and merged into the current logging window, which is written into the
trainer's ``_metrics[mode]``: GRPOTrainer averages that dict over the window and logs it in its own ``log()``, so the
figures reach ``log_history`` and every ``report_to`` integration, with ``eval_`` in evaluation. A callback's
``on_log`` could not: transformers passes it a copy, after the integrations. Each figure is written as the window's
one value (a count, a fraction over the window, a percentile of the window's samples), so TRL's mean leaves it as
it is. Nothing here sends a request to the environment.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from orsgen.runtime import client, hooks, tasks, trl, worker_metrics
from orsgen.runtime.counts import PREFIX, Counts, figures, merge, stamped, totals
from orsgen.runtime.trl.callback import Callback

_SENTINEL = PREFIX + "episodes"  # absent from `_metrics[mode]`: TRL logged the window and cleared it


def _silent(trainer: Any | None) -> str | None:
    """Why the figures cannot reach this trainer's logs, if they cannot."""
    if trainer is None:
        return "no trainer calls it"
    if trl.metrics_window(trainer, "train") is None:
        return f"{type(trainer).__name__} has no _metrics (TRL's GRPO trainers do)"
    return None


class EpisodeMetrics(Callback):
    """Adds the ``orsgen/...`` figures (docs/reference.md: "Episode metrics") to the trainer's logs, for training and (as
    ``eval_orsgen/...``) evaluation, summed over every rank. One per trainer: ``callbacks=[EpisodeMetrics()]``."""

    def __init__(self) -> None:
        worker_metrics.for_children()  # a worker this process spawns (AsyncGRPOTrainer's) counts for us
        self._lock = threading.RLock()  # re-entered when garbage collection closes an adapter inside _seen
        self._since: dict[str, Counts] = {"train": Counts(), "eval": Counts()}  # this rank, since the last flush
        self._window: dict[str, Counts] = {"train": Counts(), "eval": Counts()}  # every rank, this log window
        self._totals_seen = totals()
        self._draws_seen = tasks.drawn()[0]
        me = weakref.ref(self)  # the hooks must not keep a finished run's callback alive

        def listen(event: hooks.Event) -> None:
            def listener(record: Any) -> None:
                callback = me()
                if callback is None:
                    hooks.remove(event, listener)
                else:
                    callback._seen(event, record)

            hooks.add(event, listener)

        for event in hooks.EVENTS:
            listen(event)

    # -- events (any thread) -------------------------------------------------------------------------------------

    def _mode(self, stream: str | None = None) -> str:
        """The record's own stream, else the trainer's mode as TRL decides it (model.training)."""
        if stream is not None:
            return stream
        return trl.training(self._trainer() if self._trainer is not None else None)

    def _seen(self, event: str, record: Any) -> None:
        if self._trainer is None:  # before the trainer was built (dataset(prompts=True), a look by hand)
            return
        with self._lock:
            self._since[self._mode(record.stream)].take(event, record)

    # -- the trainer's events (its thread, every rank at once) ---------------------------------------------------

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flush("train")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flush("eval")

    def _flush(self, mode: str) -> None:
        trainer = self.trainer()
        why = _silent(trainer)
        if trainer is None or why is not None:
            client.once("metrics-off", logging.WARNING, "orsgen: EpisodeMetrics logs nothing: %s", why)
            return
        if trl.rollouts_elsewhere(trainer):  # AsyncGRPOTrainer: the worker counts, TRL's log() brings the figures
            holder = trl.worker_figures(trainer) if mode == "train" else None
            if holder is not None:
                worker_metrics.install(holder)
            elif mode == "train" and trainer.accelerator.is_main_process:
                client.once("metrics-off", logging.WARNING, "orsgen: EpisodeMetrics logs nothing: %s's rollout_worker "
                            "has no metrics_queue (TRL's AsyncRolloutWorker has)", type(trainer).__name__)
            return
        with self._lock:
            mine, self._since[mode] = self._since[mode], Counts()
        self._totals_seen = stamped(mine, self._totals_seen)
        if mode == "train":
            drawn, levels = tasks.drawn()
            mine.draws, self._draws_seen = drawn - self._draws_seen, drawn
            mine.pools = levels
        parts = trl.gather(trainer, mine)  # a collective: every rank flushes at the same step
        logged = trl.metrics_window(trainer, mode)
        if logged is None:
            return
        if _SENTINEL not in logged:  # TRL logged the last window (and cleared it): a new one begins
            self._window[mode] = Counts()
        window = self._window[mode]
        merge(window, parts)
        window.sessions_open = sum(p.sessions_open for p in parts)
        window.draws += parts[0].draws
        window.pools = parts[0].pools or window.pools
        for key, value in figures(window).items():
            logged[key] = [value]
