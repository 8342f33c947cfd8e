"""determinism: the same calls on the same task twice (fresh sessions, one after the other) must give the same
results and rewards: the working tools that keep an episode going, then a call that ends it (one seen to finish an
episode, else the terminal tool). A difference is a failure, or a warning where the environment says it is random
(a tool's description or the task's spec says random, stochastic or nondeterministic)."""

from __future__ import annotations

import json
import re
from typing import Any

from orsgen.doctor.check import FAILED, PASSED, SKIPPED, WARNING, Check, Facts
from orsgen.doctor.probe import Outcome, episode_reward
from orsgen.errors import OrsgenError

RANDOM = re.compile(r"\b(random\w*|stochastic\w*|non-?deterministic\w*)\b", re.IGNORECASE)
TOOLS = 6


def sequence(facts: Facts) -> list[tuple[str, dict[str, Any]]]:
    """An honest probe's episode: the working tools that keep it going, then one call that ends it."""
    going = [t for t in facts.working() if not t.terminal and not facts.answered[t.name].finished][:TOOLS]
    calls = [(t.name, facts.made[t.name].values) for t in going]
    ending = facts.finishing[:1] or [(t.name, facts.made[t.name].values) for t in facts.working() if t.terminal]
    return calls + ending[:1]


def run(facts: Facts) -> Check:
    if facts.split is None:
        return Check("determinism", SKIPPED, "no task to open a session on (contract)")
    if facts.shared is not None:
        return Check("determinism", SKIPPED, "not judged: sessions share state (isolation), so runs differ anyway")
    calls = sequence(facts)
    if not calls:
        return Check("determinism", SKIPPED, "no tool answered (tools answer): nothing to repeat")
    first = facts.probe.episode(facts.split, 0, calls)
    second = facts.probe.episode(facts.split, 0, calls)
    facts.saw(first + second)
    rewards = [episode_reward(first), episode_reward(second)]
    facts.honest += [r for r in rewards if r is not None]
    where = f"{facts.split} task 0"
    difference = _difference(first, second)
    if difference is None and rewards[0] == rewards[1]:
        reward = "no reward" if rewards[0] is None else f"reward {rewards[0]:g}"
        tools = ", ".join(dict.fromkeys(n for n, _ in calls))
        return Check("determinism", PASSED, f"the same {_calls(len(calls))} twice on {where} ({tools}): the same "
                     f"results and {reward}", figures={"calls": len(calls), "reward": rewards[0]})
    said = difference or f"the episode's reward {rewards[0]} then {rewards[1]}"
    facts.varies = said
    figures = {"calls": len(calls), "rewards": rewards}
    summary = f"the same calls twice on {where} differ: {said}"
    if _says_random(facts):
        return Check("determinism", WARNING, summary + " (the environment says it is random)",
                     fix="GRPO ranks a group's rollouts by reward: keep the noise small next to what the model "
                     "controls, or seed it from the task spec", figures=figures)
    return Check("determinism", FAILED, summary, fix="make results and rewards a function of the task and the calls "
                 "(seed any randomness from the task spec); if it is random by design, say so in the tool's "
                 "description", figures=figures)


def _difference(first: list[Outcome], second: list[Outcome]) -> str | None:
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if a.same() != b.same():
            if (a.kind, a.text, a.finished) == (b.kind, b.text, b.finished):
                return f"call {i + 1}, {a.tool}, gave reward {a.reward} then {b.reward}"
            return f"call {i + 1}, {a.tool}, {a.shown()} then {b.shown()}"
    return None


def _says_random(facts: Facts) -> bool:
    described = " ".join(t.description for t in facts.tools)
    try:
        spec = json.dumps(facts.live.server().task_range(facts.split or "", 0, 1))
    except OrsgenError:
        spec = ""
    return RANDOM.search(described + " " + spec) is not None


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"
