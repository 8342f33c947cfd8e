"""Reward functions for ``GRPOTrainer(reward_funcs=[...])``. Without any, TRL uses the adapter's ``get_reward()``
(the outcome); with one of these, ``get_reward()`` returns None for the episodes it scored, so no episode is counted
twice. They read ``environments``, which AsyncGRPOTrainer does not pass: there, rely on ``get_reward()``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orsgen.runtime.adapter import Adapter, call_tool, episode_of
from orsgen.runtime.episode import Episode
from orsgen.runtime.errors import ToolError


def _each(environments: Sequence[Any], score: Callable[[Episode[Adapter]], float | None]) -> list[float | None]:
    """`score` of each orsgen adapter's episode, claimed (an episode that did not start gives None, and
    get_reward() then None: counted once). TRL's multi-environment mode may mix in environments of other kinds:
    theirs get None (scored by their own get_reward), as TRL does for an environment a reward source is not for."""
    out: list[float | None] = []
    for env in environments:
        episode = episode_of(env)
        out.append(None if episode is None else episode.claim(score(episode)))
    return out


def outcome_reward(environments: Sequence[Adapter], **kwargs: Any) -> list[float | None]:
    """The last reward a tool gave in each episode (unscored: `unscored_reward`, None by default)."""
    return _each(environments, lambda episode: episode.or_unscored(episode.reward))


def total_reward(environments: Sequence[Adapter], **kwargs: Any) -> list[float | None]:
    """The sum of every step's reward (no step scored: `unscored_reward`, None by default)."""
    return _each(environments, lambda episode: episode.or_unscored(_total(episode.rewards)))


def _total(rewards: list[float | None]) -> float | None:
    scored = [r for r in rewards if r is not None]
    return sum(scored) if scored else None


def finished_reward(environments: Sequence[Adapter], **kwargs: Any) -> list[float | None]:
    """The outcome of episodes that finished (none scored: `unscored_reward`); 0.0 for episodes that did not."""
    return _each(environments, lambda episode: episode.or_unscored(episode.reward) if episode.finished else 0.0)


def shaped_reward(shape: Callable[[Adapter], float | None], name: str = "shaped_reward") -> Any:
    """A reward function from your own shaping of an episode, e.g. a bonus for finishing early::

        reward_funcs=[shaped_reward(lambda env: (env.reward or 0.0) - 0.01 * len(env.rewards))]
    """

    def reward(environments: Sequence[Adapter], **kwargs: Any) -> list[float | None]:
        return _each(environments, lambda episode: shape(episode.adapter))

    reward.__name__ = reward.__qualname__ = name
    return reward


def terminal_reward(
    tool: dict[str, Any], completions: Sequence[Any], environments: Sequence[Adapter]
) -> list[float | None]:
    """Send each completion's final assistant message to the terminal `tool`; its reward is the episode's."""
    scores: list[float | None] = []
    for completion, env in zip(completions, environments, strict=True):
        if episode_of(env) is None:
            scores.append(None)
            continue
        messages = completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
        final = next((m.get("content") for m in reversed(messages) if m.get("role") == "assistant"), "") or ""
        arg = tool.get("arg")
        try:
            call_tool(env, tool["name"], {arg: final if isinstance(final, str) else str(final)} if arg else {})
        except ToolError:
            pass  # the episode keeps what it had (or stays unscored)
        scores += _each([env], lambda episode: episode.or_unscored(episode.reward))
    return scores
