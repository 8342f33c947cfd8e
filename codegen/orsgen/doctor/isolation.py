"""isolation: what one session does must not reach another. The working tools that keep an episode going are
called twice each (the second round shows what the first left), on a session alone, then on `sessions` sessions of
the same task opened at once with their calls interleaved (each round made at once), then alone again. Every free
string argument carries a marker of its session: a marker that shows up in another session's results is state
shared between sessions, whatever else the tools do. When the two sessions alone agree, each interleaved session
must get what they got (markers aside); when they do not, the tools change from run to run (determinism says so)
and only the markers are judged."""

from __future__ import annotations

import secrets
from typing import Any

from orsgen.doctor.check import FAILED, PASSED, SKIPPED, Check, Facts, Tool
from orsgen.doctor.probe import Opened, Outcome

TOOLS = 6  # tools in the sequence, each called twice
FIX = ("keep each episode's state on the environment instance (set in __init__ or setup()), never in a class "
       "attribute, a module global or a shared default value")


def run(facts: Facts, sessions: int) -> Check:
    if facts.split is None:
        return Check("isolation", SKIPPED, "no task to open a session on (contract)")
    probe, split = facts.probe, facts.split
    tools = [t for t in facts.working() if not t.terminal and not facts.answered[t.name].finished][:TOOLS]
    markers = [f"orsgen-{i}-{secrets.token_hex(3)}" for i in range(sessions + 2)]
    plans = [_calls(facts, tools, marker) for marker in markers]
    alone = _alone(facts, plans[0])
    opened = probe.open_many(split, 0, sessions)
    started = [o for o in opened if isinstance(o, Opened)]
    try:
        if len(started) < sessions:
            why = next(o for o in opened if isinstance(o, str))
            return Check("isolation", FAILED, f"{sessions - len(started)} of {sessions} sessions opened at once did "
                         f"not start: {why}", fix="let sessions of one task start at once (no shared lock, file or "
                         "port held by one of them)")
        together: list[list[Outcome]] = [[] for _ in started]
        for step in range(len(plans[0])):
            made = probe.call_many([(s, plans[i + 1][step][0], plans[i + 1][step][1]) for i, s in enumerate(started)])
            for i, outcome in enumerate(made):
                together[i].append(outcome)
    finally:
        probe.close_many(started)
    again = _alone(facts, plans[-1])
    runs = [alone, *together, again]
    for outcomes in runs:
        facts.saw(outcomes)
    leak = _leak(runs, markers, tools)
    if leak is not None:
        facts.shared = leak
        return Check("isolation", FAILED, leak, fix=FIX)
    base = [_plain(o, markers) for o in alone]
    if not tools:
        return Check("isolation", PASSED, f"{sessions} sessions of {split} task 0 started and closed at once (no "
                     "working tool keeps an episode going: no calls to compare)")
    if base != [_plain(o, markers) for o in again]:
        return Check("isolation", PASSED, f"{sessions} sessions at once: no session saw another's text; two "
                     "sessions alone got different results, so results were not compared (determinism)",
                     details=[_first_difference(alone, again, markers, "in a first session alone", "in a later one")])
    for outcomes in together:
        if [_plain(o, markers) for o in outcomes] != base:
            said = _first_difference(alone, outcomes, markers, "alone", f"beside {sessions - 1} other sessions")
            facts.shared = said
            return Check("isolation", FAILED, f"calls interleaved on {sessions} sessions of {split} task 0 "
                         f"differ from the same calls alone: {said}", fix=FIX)
    calls = len(plans[0])
    return Check("isolation", PASSED, f"{sessions} sessions of {split} task 0 at once, {calls} interleaved calls "
                 f"each ({', '.join(t.name for t in tools)}): each got what a session alone gets, none saw "
                 "another's text", figures={"sessions": sessions, "calls": calls})


def _calls(facts: Facts, tools: list[Tool], marker: str) -> list[tuple[str, dict[str, Any]]]:
    """Each tool twice, in order, with `marker` in every free string argument."""
    once = [(t.name, _marked(t, facts.made[t.name].values, marker)) for t in tools]
    return once + once


def _marked(tool: Tool, values: dict[str, Any], marker: str) -> dict[str, Any]:
    properties = (tool.schema or {}).get("properties") or {}
    marked = dict(values)
    for name, node in properties.items():
        if name in values and isinstance(values[name], str) and _free(node, len(marker)):
            marked[name] = marker
    return marked


def _free(node: Any, length: int) -> bool:
    """A plain string argument: any text of this length will do."""
    if not isinstance(node, dict) or node.get("type") != "string":
        return False
    if any(key in node for key in ("enum", "const", "pattern", "format")):
        return False
    return not (isinstance(node.get("maxLength"), int) and node["maxLength"] < length)


def _alone(facts: Facts, calls: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
    assert facts.split is not None
    return facts.probe.episode(facts.split, 0, calls) if calls else []


def _leak(runs: list[list[Outcome]], markers: list[str], tools: list[Tool]) -> str | None:
    """The first result that holds another session's marker."""
    names = ["the first session alone", *(f"session {i} of those at once" for i in range(1, len(runs) - 1)),
             "a later session alone"]
    for i, outcomes in enumerate(runs):
        for outcome in outcomes:
            foreign = [m for j, m in enumerate(markers) if j != i and m in outcome.text]
            if foreign:
                owner = markers.index(foreign[0])
                return (f"{outcome.tool} showed {names[i]} text that {names[owner]} sent ({foreign[0]!r}): state is "
                        "shared between sessions")
    return None


def _plain(outcome: Outcome, markers: list[str]) -> tuple[Any, ...]:
    """An outcome with its own session's marker replaced, so sessions compare."""
    text = outcome.text
    for marker in markers:
        text = text.replace(marker, "<marker>")
    return outcome.kind, text, outcome.reward, outcome.finished, outcome.reason


def _first_difference(a: list[Outcome], b: list[Outcome], markers: list[str], said_a: str, said_b: str) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if _plain(x, markers) != _plain(y, markers):
            return f"call {i + 1}, {x.tool}, {x.shown()} {said_a} but {y.shown()} {said_b}"
    return f"{said_a} and {said_b} made {len(a)} and {len(b)} calls"
