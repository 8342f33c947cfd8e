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

import collections
import logging
import threading
import weakref
from dataclasses import dataclass, field, fields
from typing import Any

from transformers import TrainerCallback

from orsgen.runtime import ahead, calls, client, hooks, sessions, tasks, trl
from orsgen.runtime.episode import Unscored

PREFIX = "orsgen/"
_SENTINEL = PREFIX + "episodes"  # absent from `_metrics[mode]`: TRL logged the window and cleared it


@dataclass
class _Counts:
    """What one rank saw since the last flush (counts and latency samples), or a window's sum over ranks."""

    episodes: int = 0
    scored: int = 0
    finished: int = 0
    unscored: collections.Counter[Unscored] = field(default_factory=collections.Counter)  # by reason
    calls: int = 0
    failed_calls: int = 0
    starts: int = 0
    start_failures: int = 0
    start_retries: int = 0
    capacity_refusals: int = 0
    ahead_opened: int = 0
    ahead_taken: int = 0
    ahead_unused: int = 0
    calls_ahead: int = 0  # tool calls started ahead of TRL's (calls.py)
    outputs_truncated: int = 0  # tool results a budget cut (text or images) before the model read them
    chars_cut: int = 0  # characters cut by max-output-chars
    tokens_cut: int = 0  # tokens cut by max-output-tokens
    images_left_out: int = 0
    tool_timeouts: int = 0  # calls with no answer within their bound
    sessions_open: int = 0  # a level, not a count: the last flush's, summed over ranks
    reset_seconds: list[float] = field(default_factory=list)
    tool_seconds: list[float] = field(default_factory=list)
    groups: int = 0  # GRPO groups whose episodes ended (a group spanning ranks once)
    zero_spread: int = 0  # those of them whose rewards did not spread (tasks.spreads)
    # This rank's rewards by GRPO group since the last flush (merged over ranks into `groups`, `zero_spread`).
    group_rewards: dict[int, list[float | None]] = field(default_factory=dict)
    # The difficulty order's draws by pool (and by the floor) and its pools' sizes at the last round drawn: the
    # same on every rank (each draws every group of a round), so one rank's, never summed.
    draws: collections.Counter[str] = field(default_factory=collections.Counter)
    pools: dict[str, int] = field(default_factory=dict)

    def add(self, other: _Counts) -> None:
        for f in fields(self):
            if f.name in ("sessions_open", "group_rewards", "draws", "pools"):
                continue
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]  # nearest rank


def figures(c: _Counts) -> dict[str, float]:
    """The logged figures of a window (fractions and per-episode means only when it had episodes)."""
    out: dict[str, float] = {"episodes": c.episodes}
    out.update({f"unscored/{reason}": c.unscored[reason] for reason in Unscored})  # every reason, by construction
    out.update({
        "starts": c.starts, "start_failures": c.start_failures,
        "start_retries": c.start_retries, "capacity_refusals": c.capacity_refusals, "ahead/opened": c.ahead_opened,
        "ahead/taken": c.ahead_taken, "ahead/unused": c.ahead_unused, "calls_ahead": c.calls_ahead, "sessions_open": c.sessions_open,
        "outputs_truncated": c.outputs_truncated, "chars_cut": c.chars_cut, "tokens_cut": c.tokens_cut,
        "images_left_out": c.images_left_out, "tool_timeouts": c.tool_timeouts,
    })
    if c.episodes:
        out.update({"scored_fraction": c.scored / c.episodes, "finished_fraction": c.finished / c.episodes,
                    "tool_calls_per_episode": c.calls / c.episodes,
                    "tool_failures_per_episode": c.failed_calls / c.episodes})
    for name, samples in (("reset_seconds", c.reset_seconds), ("tool_seconds", c.tool_seconds)):
        if samples:
            out[f"{name}_p50"], out[f"{name}_p95"] = _percentile(samples, 0.5), _percentile(samples, 0.95)
    if c.groups:
        out["groups_zero_spread"] = c.zero_spread / c.groups
    if c.pools:  # the difficulty order drew in this process (task_order = "difficulty")
        out.update({f"pool/{pool}": c.pools.get(pool, 0) for pool in tasks.ROUTES})
        out.update({f"draws/{route}": c.draws[route] for route in (*tasks.ROUTES, "floor")})
    return {PREFIX + key: float(value) for key, value in out.items()}


def _totals() -> tuple[int, int, int, int]:
    """The process's running totals these figures are the differences of: sessions opened ahead, taken, unused; calls
    started ahead."""
    return ahead.totals["opened"], ahead.totals["taken"], ahead.totals["unused"], calls.totals["started"]


def _silent(trainer: Any | None) -> str | None:
    """Why the figures cannot reach this trainer's logs, if they cannot."""
    if trainer is None:
        return "no trainer calls it"
    if trl.metrics_window(trainer, "train") is None:
        return f"{type(trainer).__name__} has no _metrics (TRL's GRPO trainers do)"
    if trl.rollouts_elsewhere(trainer):
        return f"{type(trainer).__name__} runs its rollouts in another process, out of the callback's sight"
    return None


class EpisodeMetrics(TrainerCallback):  # type: ignore[misc]
    """Adds the ``orsgen/...`` figures (docs/reference.md: "Episode metrics") to the trainer's logs, for training and (as
    ``eval_orsgen/...``) evaluation, summed over every rank. One per trainer: ``callbacks=[EpisodeMetrics()]``."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entered when garbage collection closes an adapter inside _seen
        self._since: dict[str, _Counts] = {"train": _Counts(), "eval": _Counts()}  # this rank, since the last flush
        self._window: dict[str, _Counts] = {"train": _Counts(), "eval": _Counts()}  # every rank, this log window
        self._totals_seen = _totals()
        self._draws_seen = collections.Counter(tasks.totals)
        self._trainer: weakref.ref[Any] | None = None
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
            if event == "episode_end":
                c = self._since[self._mode(record.stream)]
                c.episodes += 1
                c.scored += record.scored
                c.finished += record.finished
                c.calls += record.calls
                c.failed_calls += record.failures
                if record.reason is not None:
                    c.unscored[Unscored(record.reason)] += 1
                group = getattr(record.episode, "group", None)
                if group is not None:
                    c.group_rewards.setdefault(group, []).append(record.reward)
            elif event == "episode_start":
                self._since[self._mode(record.stream)].reset_seconds.append(record.seconds)
            elif event == "tool_call":
                c = self._since[self._mode(record.stream)]
                c.tool_seconds.append(record.seconds)
                c.outputs_truncated += bool(record.truncated or record.images_left_out)
                c.chars_cut += record.truncated if record.truncated_unit == "characters" else 0
                c.tokens_cut += record.truncated if record.truncated_unit == "tokens" else 0
                c.images_left_out += record.images_left_out
                c.tool_timeouts += record.timed_out
            elif event == "session_open":  # booked to the batch it was opened for, whenever it finished
                c = self._since[self._mode(record.stream)]
                c.starts += 1
                c.start_failures += record.error is not None
                c.start_retries += record.attempt > 0
                c.capacity_refusals += record.status == 429

    # -- the trainer's events (its thread, every rank at once) ---------------------------------------------------

    def _find(self) -> Any | None:
        trainer = self._trainer() if self._trainer is not None else None
        if trainer is None:
            trainer = trl.trainer_of(self)
            self._trainer = weakref.ref(trainer) if trainer is not None else None
        return trainer

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._find()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._find()  # a callback added after the trainer was built (trainer.add_callback)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flush("train")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flush("eval")

    def _flush(self, mode: str) -> None:
        trainer = self._find()
        why = _silent(trainer)
        if trainer is None or why is not None:
            client.once("metrics-off", logging.WARNING, "orsgen: EpisodeMetrics logs nothing: %s", why)
            return
        with self._lock:
            mine, self._since[mode] = self._since[mode], _Counts()
        seen = _totals()
        mine.ahead_opened, mine.ahead_taken, mine.ahead_unused, mine.calls_ahead = (
            now - before for now, before in zip(seen, self._totals_seen, strict=True))
        self._totals_seen = seen
        mine.sessions_open = sessions.held()
        if mode == "train":
            drawn = collections.Counter(tasks.totals)
            mine.draws, self._draws_seen = drawn - self._draws_seen, drawn
            mine.pools = dict(tasks.levels)
        parts = trl.gather(trainer, mine)  # a collective: every rank flushes at the same step
        logged = trl.metrics_window(trainer, mode)
        if logged is None:
            return
        if _SENTINEL not in logged:  # TRL logged the last window (and cleared it): a new one begins
            self._window[mode] = _Counts()
        window = self._window[mode]
        for part in parts:
            window.add(part)
        window.sessions_open = sum(p.sessions_open for p in parts)
        merged: dict[int, list[float | None]] = {}
        for part in parts:  # a group spanning ranks is one group
            for group, rewards in part.group_rewards.items():
                merged.setdefault(group, []).extend(rewards)
        window.groups += len(merged)
        window.zero_spread += sum(not tasks.spreads(rewards) for rewards in merged.values())
        window.draws += parts[0].draws
        window.pools = parts[0].pools or window.pools
        for key, value in figures(window).items():
            logged[key] = [value]
