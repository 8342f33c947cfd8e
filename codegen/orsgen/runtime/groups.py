"""`group_reward`: each GRPO group's transcripts scored against each other by the environment (`score_group`).

Groups are GRPO's: consecutive `num_generations` rollouts of one task, read from the trainer as TRL forms them.
A group is posted, on one of its own sessions (still open: a batch's sessions close once TRL's own get_reward()
reward, which runs after the user's reward functions, has read the batch, else at the next batch's resets, at
close_all() or at exit; not one the environment ended, as a tool that raised ends its rollout's), as one request; a batch's groups are posted at once. A rollout whose episode did not start
(or is void: a stale prompt) is never sent and stays None: the judge compares the group's other rollouts among
themselves, when at least two started (a comparison needs two, and a lone score's advantage in its group is 0). A
group that cannot be scored (unsupported, the judge failed, fewer than two started) gets None for each rollout, never a
made-up score.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orsgen.runtime import client, scoring, trl
from orsgen.runtime.adapter import Adapter, episode_of

if TYPE_CHECKING:
    from orsgen.runtime.episode import Episode
    from orsgen.runtime.pinned import Pinned

log = logging.getLogger("orsgen")
__all__ = ["group_reward"]


def __getattr__(name: str) -> Any:
    if name == "requests":  # scoring requests sent by this process (scoring.py's)
        return scoring.requests
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def group_reward(prompts: Sequence[Any], completions: Sequence[Any], environments: Sequence[Adapter] | None,
                 pinned: Pinned, accepted: Sequence[str]) -> list[float | None]:
    """One comparative score per rollout, index-aligned with TRL's completions; None for a group not scored, and
    for the groups of other environments (TRL's multi-environment mode: they are theirs to score)."""
    if environments is None:  # AsyncGRPOTrainer: its worker's rollouts, matched to their episodes (scoring.py)
        if trl.worker() is None:
            raise RuntimeError(trl.NO_GROUP_PLACE)
        found = scoring.worker_scores(prompts, completions, accepted, pinned)
        if found is None:
            raise RuntimeError(trl.NO_GROUP)
        return found
    size, offset = trl.group_layout(environments)
    if offset or len(environments) % size:
        raise RuntimeError(f"group_reward: this rank holds {len(environments)} rollouts starting {offset} into a "
                           f"GRPO group of {size}, so a group is split across ranks and cannot be scored in one "
                           "request: make per_device_train_batch_size a multiple of num_generations")
    # sessions still opening in the background (open_in_background) are settled here
    episodes = [episode_of(env) if getattr(env, "pinned", None) is pinned else None for env in environments]
    jobs = []
    for i in range(0, len(environments), size):
        mine = episodes[i:i + size]
        ours = all(e is not None for e in mine)
        jobs.append(_score(mine, prompts[i:i + size], completions[i:i + size], accepted) if ours else _none(size))

    async def together() -> list[list[float | None]]:
        return list(await asyncio.gather(*jobs))

    scored = client.loop().submit(together()).result()  # each request is bounded (ORSGEN_TOOL_TIMEOUT) in _score
    return [score for group in scored for score in group]


async def _none(size: int) -> list[float | None]:
    return [None] * size


async def _score(group: Sequence[Episode[Adapter] | None], prompts: Sequence[Any], completions: Sequence[Any],
                 accepted: Sequence[str]) -> list[float | None]:
    unscored: list[float | None] = [None] * len(group)
    episodes = [e for e in group if e is not None]
    where = scoring.describe(episodes)
    started = {i: e.session for i, e in enumerate(group) if e is not None and e.void is None and e.session is not None}
    if not scoring.one_task(where, episodes) or not scoring.enough(where, len(started), len(group)):
        return unscored
    # posted on a session the environment did not end (a tool that raised ends its rollout's: the SDK refuses it)
    alive = [s for i, s in started.items() if group[i].gone is None]  # type: ignore[union-attr]
    if not alive:
        log.warning("orsgen: %s is not scored: the environment ended every one of its sessions", where)
        return unscored
    return await scoring.post(where, episodes[0].adapter, alive[0], list(started), prompts, completions, accepted)
