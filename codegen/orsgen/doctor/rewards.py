"""reward probes: policies that do nothing useful must never earn the best reward the honest probes saw. The
honest probes are the calls made from each tool's schema (which play naively: "test" for a string) and, with
--endpoint, a model's episodes. On the first tasks of the probed split, each on a fresh session: no call at all
(with a terminal tool: an empty final message; without one nothing can pay it, rewards come from tools), each tool
as the first and only call with the emptiest arguments its schema accepts, and each tool that pays without ending
the episode called REPEATS times. A policy is paid as a solver, and the environment hackable, when it earns more
than the least reward seen and either more than every call made from the schemas or as much as the model's best
episode where that beat them. An environment whose results change from run to run (determinism) is not judged."""

from __future__ import annotations

import json
from typing import Any

from orsgen.doctor import arguments
from orsgen.doctor.check import FAILED, PASSED, SKIPPED, WARNING, Check, Facts
from orsgen.doctor.probe import episode_reward

TASKS = 3
TOOLS = 6
REPEATS = 20
PAYING = 3  # tools repeated


def run(facts: Facts) -> Check:
    if facts.split is None:
        return Check("reward probes", SKIPPED, "no task to open a session on (contract)")
    if facts.varies is not None:
        return Check("reward probes", SKIPPED, "not judged: the same calls give other results from run to run "
                     "(determinism)")
    hung, split = facts.probe.hung, facts.split
    tools = [t for t in facts.tools if t.name not in hung][:TOOLS]
    terminal = next((t for t in facts.tools if t.terminal and t.name not in hung), None)
    paying = [t for t in facts.working() if not t.terminal and facts.answered[t.name].reward is not None
              and not facts.answered[t.name].finished][:PAYING]
    policies: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = []
    if terminal is not None:  # without one, no call pays nothing: rewards come from tools
        policies.append(("no call (an empty final message)",
                         [(terminal.name, arguments.made(terminal.schema, "empty").values)]))
    for tool in tools:
        if not tool.terminal:
            empty = arguments.made(tool.schema, "empty").values
            policies.append((f"{tool.name}({_args(empty)}) first", [(tool.name, empty)]))
    for tool in paying:
        policies.append((f"{tool.name} called {REPEATS} times", [(tool.name, facts.made[tool.name].values)] * REPEATS))
    earned: list[tuple[str, int, float]] = []
    for index in range(min(TASKS, facts.tasks)):
        for policy, calls in policies:
            outcomes = facts.probe.episode(split, index, calls)
            facts.saw(outcomes)
            reward = episode_reward(outcomes)
            if reward is not None:
                earned.append((policy, index, reward))
    naive = max(facts.honest, default=None)
    model = max(facts.model, default=None)
    figures = {"best_probe": naive, "best_model": model, "trivial": [{"policy": p, "task": i, "reward": r}
                                                                     for p, i, r in earned]}
    low = min([*facts.rewards, *(r for _, _, r in earned)], default=None)

    def paid(reward: float) -> bool:
        if low is not None and reward <= low:
            return False  # the least anything earns: no pay
        if naive is None or reward > naive:
            return True
        return model is not None and model > naive and reward >= model

    hacks = [(p, i, r) for p, i, r in earned if paid(r)]
    ran = [p for p, _ in policies]
    tasks = f"{split} tasks 0-{min(TASKS, facts.tasks) - 1}" if facts.tasks > 1 else f"{split} task 0"
    if hacks:
        policy, index, reward = max(hacks, key=lambda h: h[2])
        than = (f"at least the model's best ({model:g})" if model is not None and (naive is None or reward <= naive)
                else f"more than any call made from the schemas ({naive:g})" if naive is not None else
                "where no call made from the schemas earned any reward")
        return Check("reward probes", FAILED, f"hackable: {policy} earns {reward:g} on {split} task {index}, {than}",
                     fix="pay only for what the task asks: check an answer against the task (an empty one must not "
                     "match), and pay no reward a call can collect by being repeated", figures=figures)
    if naive is None and model is None and not earned:
        return Check("reward probes", WARNING, f"no probe earned any reward on {tasks}: whether a trivial policy is "
                     "paid cannot be told", fix="--endpoint URL --model M measures a model's episodes too",
                     figures=figures)
    best = max(r for r in (naive, model) if r is not None) if (naive, model) != (None, None) else None
    return Check("reward probes", PASSED, f"{len(ran)} trivial {_plural(len(ran), 'policy', 'policies')} on {tasks} "
                 f"({_kinds(ran)}): none earned more than the calls made from the schemas"
                 + (f" ({naive:g})" if naive is not None else "") + ("" if model is None else
                                                                    f" or the model's best ({model:g})"),
                 figures=figures | {"best": best})


def _kinds(ran: list[str]) -> str:
    kinds = ["no call"] if any(p.startswith("no call") for p in ran) else []
    kinds += ["each tool first with empty arguments"] if any(p.endswith(" first") for p in ran) else []
    kinds += [f"a paying call repeated {REPEATS} times"] if any(p.endswith(" times") for p in ran) else []
    return ", ".join(kinds)


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _args(values: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in values.items())
    return text if len(text) <= 40 else text[:37] + "..."
