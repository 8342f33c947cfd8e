"""The counts behind the `orsgen/...` figures (docs/reference.md: "Episode metrics"): what one process saw since it last
gave them away, merged into a logging window, and the window's figures. The trainer's side is metrics.py
(`EpisodeMetrics`); AsyncGRPOTrainer's worker counts with worker_metrics.py. Nothing here imports transformers.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, fields
from typing import Any

from orsgen.runtime import ahead, calls, sessions, tasks
from orsgen.runtime.episode import Unscored

PREFIX = "orsgen/"


@dataclass
class Counts:
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
    starts_given_up: int = 0  # attempts given up at ORSGEN_RESET_TIMEOUT (their sessions, if opened later, closed)
    slot_wait_seconds: float = 0.0  # what starts waited for a place in the sessions budget (max_sessions)
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

    def take(self, event: str, record: Any) -> None:
        """Count one hook record."""
        if event == "episode_end":
            self.episodes += 1
            self.scored += record.scored
            self.finished += record.finished
            self.calls += record.calls
            self.failed_calls += record.failures
            if record.reason is not None:
                self.unscored[Unscored(record.reason)] += 1
            group = getattr(record.episode, "group", None)
            if group is not None:
                self.group_rewards.setdefault(group, []).append(record.reward)
        elif event == "episode_start":
            self.reset_seconds.append(record.seconds)
        elif event == "tool_call":
            self.tool_seconds.append(record.seconds)
            self.outputs_truncated += bool(record.truncated or record.images_left_out)
            self.chars_cut += record.truncated if record.truncated_unit == "characters" else 0
            self.tokens_cut += record.truncated if record.truncated_unit == "tokens" else 0
            self.images_left_out += record.images_left_out
            self.tool_timeouts += record.timed_out
        elif event == "session_open":  # booked to the batch it was opened for, whenever it finished
            self.starts += 1
            self.start_failures += record.error is not None
            self.start_retries += record.attempt > 0
            self.capacity_refusals += record.status == 429
            self.starts_given_up += record.given_up
            self.slot_wait_seconds += record.waited

    def add(self, other: Counts) -> None:
        for f in fields(self):
            if f.name in ("sessions_open", "group_rewards", "draws", "pools"):
                continue
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]  # nearest rank


def figures(c: Counts) -> dict[str, float]:
    """The logged figures of a window (fractions and per-episode means only when it had episodes)."""
    out: dict[str, float] = {"episodes": c.episodes}
    out.update({f"unscored/{reason}": c.unscored[reason] for reason in Unscored})  # every reason, by construction
    out.update({
        "starts": c.starts, "start_failures": c.start_failures,
        "start_retries": c.start_retries, "capacity_refusals": c.capacity_refusals,
        "starts_given_up": c.starts_given_up, "slot_wait_seconds": c.slot_wait_seconds, "ahead/opened": c.ahead_opened,
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


def totals() -> tuple[int, int, int, int]:
    """The process's running totals these figures are the differences of: sessions opened ahead, taken, unused; calls
    started ahead."""
    return ahead.totals["opened"], ahead.totals["taken"], ahead.totals["unused"], calls.totals["started"]


def stamped(counts: Counts, before: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """Fill in what the process's running totals grew by since `before` (totals()) and the sessions it holds now;
    the totals now."""
    seen = totals()
    counts.ahead_opened, counts.ahead_taken, counts.ahead_unused, counts.calls_ahead = (
        now - then for now, then in zip(seen, before, strict=True))
    counts.sessions_open = sessions.held()
    return seen


def merge(window: Counts, parts: list[Counts]) -> None:
    """Add `parts` (every rank's counts, or the pushes of AsyncGRPOTrainer's worker) into `window`; a GRPO group
    spanning parts is one group. Levels (sessions open, pools) are the caller's to set."""
    merged: dict[int, list[float | None]] = {}
    for part in parts:
        window.add(part)
        for group, rewards in part.group_rewards.items():
            merged.setdefault(group, []).extend(rewards)
    window.groups += len(merged)
    window.zero_spread += sum(not tasks.spreads(rewards) for rewards in merged.values())
