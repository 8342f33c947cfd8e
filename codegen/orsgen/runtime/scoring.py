"""A GRPO group's transcripts posted for comparative scores (`score_group`): the request and its rules (`post`), for
GRPOTrainer's batches (groups.py) and AsyncGRPOTrainer's rollout worker (`ended`, `worker_scores`).

The worker passes reward functions no environments, so each of the group's rollouts is matched to its episode by
identity: at the rollout's get_reward(), TRL's loop holds its group id and its completion (trl.worker_rollout), the
very object the group's scoring later passes `group_reward` in `completions`. When `group_reward` is among the
worker's reward functions, an ended rollout's session (alive: started, not ended by the environment) is held open
(its close waits, sessions.hold) until its group has ended, then the group's first such session alone until the group
is scored on it, at most ORSGEN_TOOL_TIMEOUT. The rules are GRPOTrainer's: a rollout that never started is not sent
and gets None; a group with fewer than two started, or whose scoring failed, gets None for each rollout.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orsgen.runtime import client, sessions, transcripts, trl
from orsgen.runtime.process import STATE

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncSession

    from orsgen.runtime.episode import Episode

log = logging.getLogger("orsgen")
REWARD_FUNCTION = "group_reward"  # the name a module's group scoring has among TRL's reward functions


async def post(where: str, adapter: Any, session: AsyncSession, started: Sequence[int], prompts: Sequence[Any],
               completions: Sequence[Any], accepted: Sequence[str]) -> list[float | None]:
    """The rollouts `started` (indices into `prompts` and `completions`) scored against each other on `session`:
    their scores at their indices, None elsewhere; None for each when the group could not be scored (one warning
    saying why: `where` names the group)."""
    from openreward.api.environments.types import GroupCandidate
    from openreward.api.errors import ScoreGroupUnsupported

    unscored: list[float | None] = [None] * len(completions)
    candidates = [GroupCandidate(messages=transcripts.transcript(prompts[i], completions[i], accepted),
                                 metadata={"rollout": i}) for i in started]
    _worker_groups().requests["score_group"] += 1
    try:
        scores = await asyncio.wait_for(session.score_group(candidates), client.timeout("tool"))
    except ScoreGroupUnsupported as exc:
        client.once(f"score-group-unsupported-{id(adapter.pinned)}", logging.WARNING,
                    "orsgen: %s: its groups are not scored (None): %s", type(adapter).__name__, exc)
        return unscored
    except Exception as exc:  # noqa: BLE001 - the judge failed, or the transport did: this group is unscored
        reason = f"no answer within {client.timeout('tool'):g}s (ORSGEN_TOOL_TIMEOUT)" if isinstance(
            exc, asyncio.TimeoutError) else client.describe(exc)
        log.warning("orsgen: %s is not scored (None): %s", where, reason)
        return unscored
    if len(scores) != len(candidates):
        log.warning("orsgen: %s is not scored: %d scores came back for %d rollouts", where, len(scores),
                    len(candidates))
        return unscored
    for i, score in zip(started, scores, strict=True):
        unscored[i] = float(score.reward)
    return unscored


def describe(episodes: Sequence[Episode[Any]]) -> str:
    return f"{type(episodes[0].adapter).__name__}: the group of task {episodes[0].task_index}"


def one_task(where: str, episodes: Sequence[Episode[Any]]) -> bool:
    """Whether the episodes hold one task (never a judgement across tasks); a warning when not."""
    tasks = {(e.split, e.task_index) for e in episodes}
    if len(tasks) > 1:
        log.warning("orsgen: %s is not scored: its rollouts hold tasks %s, not one", where, sorted(map(str, tasks)))
    return len(tasks) == 1


def enough(where: str, started: int, size: int) -> bool:
    """Whether a comparison can be made (two started); a warning when not."""
    if started < 2:
        log.warning("orsgen: %s is not scored: %s of its %d episodes started (a comparison needs two)", where,
                    started or "none", size)
    return started >= 2


# -- AsyncGRPOTrainer's worker ------------------------------------------------------------------------------------


@dataclass
class _Rollout:
    episode: Episode[Any]
    completion: Any
    started: bool
    session: AsyncSession | None  # held: alive when the rollout ended


@dataclass
class _Group:
    size: int
    rollouts: list[_Rollout] = field(default_factory=list)
    session: AsyncSession | None = None  # the one kept for its scoring, once every rollout ended


class WorkerGroups:
    """AsyncGRPOTrainer's worker's groups in this process (held by process.STATE), by (the worker's run, TRL's group
    id); each kept rollout's completion by id (its group, and itself: its id stays its); the scoring requests sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: dict[tuple[int, int], _Group] = {}
        self.completions: dict[int, tuple[tuple[int, int], Any]] = {}
        self.requests = {"score_group": 0}


def _worker_groups() -> WorkerGroups:
    return STATE.part("scoring", WorkerGroups)


def __getattr__(name: str) -> Any:
    if name == "requests":  # scoring requests sent by this process (groups.requests too)
        return _worker_groups().requests
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def wanted(rollout: trl.WorkerRollout) -> bool:
    """The worker scores groups with a `group_reward` (TRL names reward functions by `__name__`)."""
    return any(getattr(f, "__name__", None) == REWARD_FUNCTION for f in rollout.reward_funcs)


def ended(episode: Episode[Any], rollout: trl.WorkerRollout) -> None:
    """A rollout of the worker ended with `episode`: kept for its group's scoring."""
    started = episode.void is None and episode.session is not None
    alive = episode.session if started and episode.gone is None else None
    if alive is not None:
        sessions.hold(alive)
    key, let_go, kept_by = (rollout.run, rollout.group), [], _worker_groups()
    with kept_by.lock:
        group = kept_by.groups.setdefault(key, _Group(rollout.size))
        group.rollouts.append(_Rollout(episode, rollout.completion, started, alive))
        kept_by.completions[id(rollout.completion)] = (key, rollout.completion)
        if len(group.rollouts) == group.size:
            kept = [r.session for r in group.rollouts if r.session is not None]
            group.session, let_go = (kept[0] if kept else None), kept[1:]
    for session in let_go:
        sessions.release(session)


def worker_scores(prompts: Sequence[Any], completions: Sequence[Any], accepted: Sequence[str],
                  pinned: Any) -> list[float | None] | None:
    """The scores of the group whose `completions` these are, which ended in this worker (None when it did not):
    posted on the group's kept session, which is then let go. A group of another module's adapters gets None each."""
    kept_by = _worker_groups()
    with kept_by.lock:
        found = [kept_by.completions.get(id(c)) for c in completions]
        keys = {f[0] for f, c in zip(found, completions, strict=True) if f is not None and f[1] is c}
        if len(keys) != 1 or any(f is None for f in found):
            return None
        group = kept_by.groups.pop(keys.pop(), None)
        for completion in completions:
            kept_by.completions.pop(id(completion), None)
    if group is None or len(group.rollouts) != len(completions):
        return None
    try:
        by_completion = {id(r.completion): r for r in group.rollouts}
        aligned = [by_completion[id(c)] for c in completions]
        episodes = [r.episode for r in aligned]
        if any(getattr(e.adapter, "pinned", None) is not pinned for e in episodes):
            return [None] * len(completions)  # TRL's multi-environment mode: theirs to score
        where = describe(episodes)
        started = [i for i, r in enumerate(aligned) if r.started]
        if not one_task(where, episodes) or not enough(where, len(started), len(aligned)):
            return [None] * len(completions)
        if group.session is None:
            log.warning("orsgen: %s is not scored: the environment ended every one of its sessions", where)
            return [None] * len(completions)
        job = post(where, episodes[0].adapter, group.session, started, prompts, completions, accepted)
        return client.loop().submit(job).result()
    finally:
        sessions.release(group.session)
