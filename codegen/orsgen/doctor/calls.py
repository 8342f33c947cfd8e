"""tools answer and bad arguments: every tool called on a fresh session of the probed task, first with arguments
made from its own schema (which it must answer: no error event, no HTTP error, no traceback, no refusal of what its
schema accepts, an answer within the timeout), then without a required argument and with a wrong type (which it
must refuse in words: not answer, raise, hang or show a traceback)."""

from __future__ import annotations

import json
import re
from typing import Any

from orsgen.doctor import arguments
from orsgen.doctor.check import FAILED, PASSED, SKIPPED, WARNING, Check, Facts, Tool, names
from orsgen.doctor.probe import Outcome, StartFailed

AT_ONCE = 4  # sessions opened at once
FIX = {
    "traceback": "catch errors inside the tool and answer a short message a model can act on, not a stack trace",
    "lies": "declare the argument required in the parameter model (a field without a default): its schema is "
            "what the model is shown",
    "raised": "answer every input the schema accepts (a ToolOutput saying what is wrong), or refuse it in the "
              "parameter model (a validator), where the server refuses it in words",
    "http": "answer every input the schema accepts; the server's log says what failed",
    "timeout": "bound the tool's work (a timeout inside it) so that it answers in seconds",
    "accepted": "declare each argument's type and whether it is required in the parameter model: the server then "
                "refuses bad calls in words",
    "refused": "a listed tool must run when called with arguments its schema accepts",
    "start": "make the task start (setup() and get_prompt() must not raise or hang)",
}


def answer(facts: Facts) -> Check:
    """tools answer: each tool, arguments made from its schema, a fresh session each."""
    if facts.split is None:
        return Check("tools answer", SKIPPED, "no task to open a session on (contract)")
    for tool in facts.tools:
        facts.made[tool.name] = arguments.made(tool.schema, "minimal")
    try:
        outcomes = _each_alone(facts, [(t.name, facts.made[t.name].values) for t in facts.tools])
    except StartFailed as exc:
        return Check("tools answer", FAILED, str(exc), fix=FIX["start"])
    problems: list[tuple[str, str]] = []
    notes: list[str] = []
    for tool, outcome in zip(facts.tools, outcomes, strict=True):
        facts.answered[tool.name] = outcome
        made = facts.made[tool.name]
        given = _shown(outcome.arguments)
        if outcome.kind == "ok":
            if outcome.reward is not None:
                facts.honest.append(outcome.reward)
            if outcome.traceback:
                problems.append(("traceback", f"{tool.name} answered {given} with a traceback: {outcome.said()}"))
        elif outcome.kind == "refused" and outcome.reason == "input_validation" and not outcome.traceback:
            wanted = _unsent(tool, outcome) if made.sure else None
            if wanted is not None:
                said = (f"{tool.name} refused {given}, which its schema accepts, for want of {wanted!r}, which its "
                        f"schema says is optional: {outcome.said()}")
                problems.append(("lies", said))
            else:
                notes.append(f"{tool.name} refused {given}, made from its schema ({outcome.said()}): a constraint "
                             "the schema does not state, or one this check cannot satisfy; not judged")
        else:
            kind = "traceback" if outcome.traceback else outcome.kind if outcome.kind in FIX else "raised"
            problems.append((kind, f"{tool.name} {outcome.shown()} for {given}, which its schema accepts"))
    facts.saw(outcomes)
    figures = {"calls": [_figure(o) for o in outcomes]}
    where = f"fresh sessions of {facts.split} task 0"
    if problems:
        kind, first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check("tools answer", FAILED, first + more, fix=FIX[kind], details=[p for _, p in problems] + notes,
                     figures=figures)
    working = [t.name for t in facts.tools if facts.answered[t.name].kind == "ok"]
    if not working:
        return Check("tools answer", WARNING, f"no tool answered arguments made from its schema: {notes[0]}",
                     fix="state each constraint in the schema (Field(ge=..., pattern=...)), so a model can meet it",
                     details=notes, figures=figures)
    return Check("tools answer", PASSED, f"{names(working)} answered arguments made from their schemas "
                 f"({where})", details=notes, figures=figures)


def bad(facts: Facts) -> Check:
    """bad arguments: each working tool without a required argument and with a wrong type."""
    planned: list[tuple[Tool, str, tuple[str, dict[str, Any]]]] = []
    for tool in facts.working():
        made = facts.made[tool.name]
        dropped = arguments.without_required(tool.schema, made)
        if dropped is not None:
            planned.append((tool, f"missing its required {dropped[0]!r}", (tool.name, dropped[1])))
        wrong = arguments.wrong_type(tool.schema, made)
        if wrong is not None:
            planned.append((tool, f"with {wrong[0]!r} = {json.dumps(wrong[1])}", (tool.name, wrong[2])))
    if not planned:
        return Check("bad arguments", SKIPPED if not facts.working() else PASSED,
                     "no working tool takes an argument to get wrong" if facts.working() else
                     "no tool answered (tools answer)")
    try:
        outcomes = _each_alone(facts, [call for _, _, call in planned])
    except StartFailed as exc:
        return Check("bad arguments", FAILED, str(exc), fix=FIX["start"])
    problems: list[tuple[str, str]] = []
    for (tool, how, _), outcome in zip(planned, outcomes, strict=True):
        if outcome.kind == "refused" and outcome.reason != "episode_finished" and not outcome.traceback:
            continue
        kind = ("traceback" if outcome.traceback else "accepted" if outcome.kind == "ok" else
                outcome.kind if outcome.kind in FIX else "raised")
        problems.append((kind, f"{tool.name} {outcome.shown()} for a call {how}, which it should refuse in words"))
    facts.saw([o for o in outcomes if o.kind == "ok"])
    figures = {"calls": [{"how": how, **_figure(o)} for (_, how, _), o in zip(planned, outcomes, strict=True)]}
    if problems:
        kind, first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check("bad arguments", FAILED, first + more, fix=FIX[kind], details=[p for _, p in problems],
                     figures=figures)
    tools = list(dict.fromkeys(tool.name for tool, _, _ in planned))
    return Check("bad arguments", PASSED, f"{len(planned)} calls missing a required argument or with a wrong type: "
                 f"refused in words by {names(tools)}", figures=figures)


def _each_alone(facts: Facts, calls: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
    """Each call on a fresh session of the probed task, AT_ONCE sessions at a time; StartFailed if one did not
    start."""
    probe, found = facts.probe, []
    assert facts.split is not None
    for at in range(0, len(calls), AT_ONCE):
        batch = calls[at: at + AT_ONCE]
        opened = probe.open_many(facts.split, 0, len(batch))
        sessions = [o for o in opened if not isinstance(o, str)]
        try:
            failed = [o for o in opened if isinstance(o, str)]
            if failed:
                raise StartFailed(failed[0])
            found += probe.call_many([(o, name, args) for o, (name, args) in zip(sessions, batch, strict=True)])
        finally:
            probe.close_many(sessions)
    return found


def _unsent(tool: Tool, outcome: Outcome) -> str | None:
    """The optional argument (by its schema) that a refusal of the minimal arguments asks for: one not sent that the
    server's error names. A refusal of a value that was sent is a constraint the schema does not state: not this."""
    properties = (tool.schema or {}).get("properties") or {}
    for name in properties:
        if name not in outcome.arguments and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", outcome.raw):
            return str(name)
    return None


def _shown(values: dict[str, Any]) -> str:
    text = json.dumps(values, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _figure(outcome: Outcome) -> dict[str, Any]:
    return {"tool": outcome.tool, "arguments": outcome.arguments, "outcome": outcome.kind, "reason": outcome.reason,
            "text": outcome.said(300), "reward": outcome.reward, "finished": outcome.finished,
            "seconds": round(outcome.seconds, 4)}
