"""lifecycle and latency and size.

lifecycle: an episode a call finished takes no further call (the call again, and the other working tools, must be
refused), a closed session answers no call (a request on its id, sent without the SDK), and at the end nothing the
checks opened is still open: every session was closed with an answer within the timeout and, for an environment
the doctor serves itself, the server counts none open.

latency and size: the times of every start (session and prompt), call and end the checks made, p50 and p95, and the
largest result each tool gave, with the `max-output-chars` budget it suggests."""

from __future__ import annotations

from typing import Any

from orsgen import wire
from orsgen.doctor.check import FAILED, PASSED, SKIPPED, WARNING, Check, Facts
from orsgen.doctor.probe import StartFailed
from orsgen.errors import OrsgenError

CAP = 8_000  # characters (about 2,000 tokens): a result longer than this fills a completion
SLOW = 5.0  # seconds: a call slower than this at p95 slows every rollout


def run(facts: Facts) -> Check:
    problems: list[str] = []
    checked: list[str] = []
    if facts.split is not None and facts.finishing:
        try:
            problems += _after_the_end(facts, checked)
        except StartFailed as exc:
            problems.append(str(exc))
    spent, served = facts.probe.spent, facts.live.served
    facts.probe.close_all()
    problems += spent.close_failures[:3]
    if spent.opened != spent.closed and not spent.close_failures:
        problems.append(f"{spent.opened - spent.closed} of the {spent.opened} sessions opened were not closed")
    on_server = served.open_sessions() if served is not None else None
    if on_server:
        problems.append(f"the server still holds {on_server} session{'s' if on_server != 1 else ''} open after every "
                        "close was answered")
    figures = {"opened": spent.opened, "closed": spent.closed, "open_on_server": on_server}
    held = (f"{spent.opened} sessions opened, {spent.closed} closed" +
            ("" if on_server is None else f", {on_server} open on the server"))
    if problems:
        return Check("lifecycle", FAILED, f"{problems[0]} ({held})", details=problems, figures=figures,
                     fix="end the episode when a tool returns finished=True (the SDK's server refuses later calls) "
                     "and let teardown() return promptly")
    if not checked:
        return Check("lifecycle", PASSED if spent.opened else SKIPPED, f"{held}; no probe finished an episode, so "
                     "calls after an end were not tried", figures=figures)
    return Check("lifecycle", PASSED, f"{'; '.join(checked)}; {held}", figures=figures)


def _after_the_end(facts: Facts, checked: list[str]) -> list[str]:
    assert facts.split is not None
    probe, (name, given) = facts.probe, facts.finishing[0]
    opened = probe.open(facts.split, 0)
    try:
        if not probe.call(opened, name, given).finished:
            return []
        others = [t.name for t in facts.working() if t.name != name and not t.terminal][:2]
        after = probe.call_many([(opened, n, given if n == name else facts.made[n].values) for n in [name, *others]])
        ran = next((o for o in after if o.kind == "ok"), None)
        if ran is not None:
            return [f"after {name} finished the episode, {ran.tool} still ran and {ran.shown()}"]
        checked.append(f"after {name} finished the episode, {len(after)} call{'s were' if len(after) > 1 else ' was'} "
                       "refused")
    finally:
        probe.close(opened)
    answered = _closed_answers(facts, opened.sid, name, given)
    if answered is not None:
        return [answered]
    checked.append("a closed session answered no call")
    return []


def _closed_answers(facts: Facts, sid: str | None, name: str, given: dict[str, Any]) -> str | None:
    """What a call on a closed session got, if the server ran it; None when it was refused."""
    if sid is None:
        return None
    server = facts.live.server()
    try:
        events = server.request("POST", server.path("/call"), {"name": name, "input": given}, sid=sid, sse=True,
                                timeout=facts.probe.timeout)
    except wire.HTTPStatusError:
        return None  # 404 (or 410): no such session any more
    except OrsgenError as exc:
        return None if "error event" in str(exc) else f"a call on a closed session failed oddly: {exc}"
    return f"a call on a closed session still answered: {str(events.get('end'))[:120]}"


def latency(facts: Facts) -> Check:
    spent = facts.probe.spent
    if not spent.times["start"]:
        return Check("latency and size", SKIPPED, "no session was opened")
    shown = [f"{kind} p50 {_ms(_at(found, 0.5))} p95 {_ms(_at(found, 0.95))}"
             for kind, found in spent.times.items() if found]
    figures: dict[str, Any] = {kind: {"p50": _at(found, 0.5), "p95": _at(found, 0.95), "n": len(found)}
                               for kind, found in spent.times.items() if found}
    figures["largest"] = dict(spent.largest)
    tool, largest = max(spent.largest.items(), key=lambda item: item[1], default=(None, 0))
    size = f"largest result {largest:,} characters" + (f" ({tool})" if tool else "")
    calls = spent.times["call"]
    if largest > CAP:
        return Check("latency and size", WARNING, f"{', '.join(shown)}; {size}",
                     fix=f"cap what the model reads: max-output-chars = {CAP} in the module's [tool.orsgen.targets] "
                     f"table (or for {tool} alone)", figures=figures)
    if calls and _at(calls, 0.95) > SLOW:
        return Check("latency and size", WARNING, f"{', '.join(shown)}; {size}", fix="calls this slow stall every "
                     "rollout of a batch: speed the tool up, or give it a timeout budget", figures=figures)
    return Check("latency and size", PASSED, f"{', '.join(shown)}; {size}: no max-output-chars needed",
                 figures=figures)


def _at(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
