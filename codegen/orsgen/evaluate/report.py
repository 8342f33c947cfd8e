"""The figures as people read them: text for a terminal, markdown for a pull request."""

from __future__ import annotations

from typing import Any

from orsgen.evaluate.figures import AGAIN


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *("| " + " | ".join(row) + " |" for row in rows)]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]]


def render(summary: dict[str, Any], run: dict[str, Any], markdown: bool) -> str:
    """The report of one run: the headline figures, then each task."""
    p, e, k = summary["pass"], summary["episodes"], summary["pass"]["k"]
    title = f"{run.get('model')} on {', '.join(run.get('environments') or [])} (split {run.get('split')})"
    lines = [f"## orsgen eval: {title}" if markdown else f"orsgen eval: {title}", ""]
    figures = [
        ("episodes", f"{e['done']} of {e['planned']} done ({e['counted']} counted{_failed(summary)})"),
        ("mean reward", f"{_num(summary['reward']['mean'])} over {summary['reward']['scored']} scored episodes"),
        ("pass@1", _pct(p["at_1"])),
        (f"pass@{k}", f"{_pct(p['at_k'])} ({p['tasks_at_k']} tasks with {k} counted episodes)"),
        ("a pass", p["rule"]),
        ("unscored", reasons(summary["unscored"]) or "none"),
        ("tool calls", (f"{_num(summary['tools']['calls_per_episode'], 2)} per episode, "
                       f"{_num(summary['tools']['failures_per_episode'], 2)} failed")),
        ("latency", (f"episode p50 {_num(summary['latency']['episode_p50'], 2)} s, p95 "
                    f"{_num(summary['latency']['episode_p95'], 2)} s; model reply "
                    f"{_num(summary['latency']['model_reply_mean'], 2)} s; tool call "
                    f"{_num(summary['latency']['tool_call_mean'], 3)} s{_waited(summary['latency'])}")),
    ]
    tokens = summary.get("tokens")
    if tokens:
        figures.append(("tokens", (f"{tokens['prompt']} prompt, {tokens['completion']} completion "
                                  f"({_num(tokens['completion_per_episode'], 1)} per episode)")))
    lines += _table(["figure", "value"], [[a, b] for a, b in figures], markdown) if markdown else [
        f"{name:>12}  {value}" for name, value in figures]
    several = len({t["environment"] for t in summary["tasks"]}) > 1
    header = [*(["environment"] if several else []), "task", "episodes", "passes", "pass rate", "mean reward",
              f"pass@{k}"]
    rows = [[*([t["environment"]] if several else []), str(t["task_index"]), str(t["episodes"]),
             f"{t['passes']}/{t['counted']}", _pct(t["pass_rate"]), _num(t["mean_reward"]), _pct(t[f"pass_at_{k}"])]
            for t in summary["tasks"]]
    lines += ["", *(["### Tasks", ""] if markdown else []), *_table(header, rows, markdown)]
    return "\n".join(lines) + "\n"


def _waited(latency: dict[str, Any]) -> str:
    """The wait for a place in the sessions budget (--max-sessions), when there was one."""
    n = latency.get("episodes_waited") or 0
    return (f"; {n} episode{'s' * (n != 1)} waited {latency['session_wait_total']:.1f} s in all for a session "
            "(--max-sessions)") if n else ""


def reasons(unscored: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in unscored.items())


def _failed(summary: dict[str, Any]) -> str:
    """The episodes saved as records but not done: `--resume` runs them again (figures.AGAIN)."""
    found = {reason: n for reason in AGAIN if (n := summary["unscored"].get(reason, 0))}
    said = ", ".join(f"{n} {AGAIN[reason]}" for reason, n in found.items())
    return f"; --resume runs {sum(found.values())} again: {said}" if found else ""


def render_comparison(found: dict[str, Any], names: tuple[str, str], markdown: bool) -> str:
    a, b = names
    lines = [f"## orsgen eval: {a} -> {b}" if markdown else f"orsgen eval: {a} -> {b}", ""]
    empty = [i for i in (0, 1) if not found["counted"][i]]
    if empty:  # said once: no table of dashes, no task "measured in one run only"
        said = f"neither {a} nor {b} counted an episode" if len(empty) == 2 else f"{names[empty[0]]} counted no episode"
        why = "; ".join(f"{names[i]}: {reasons(found['unscored'][i]) or 'no episode ran'}" for i in empty)
        return "\n".join([*lines, f"{said} ({why}): nothing to compare"]) + "\n"
    k = found["k"]
    columns = [a, b] if k[0] == k[1] else [f"{a} (k={k[0]})", f"{b} (k={k[1]})"]
    figures = [[name, _num(was), _num(now)] for name, (was, now) in found["figures"].items()]
    lines += _table(["figure", *columns], figures, markdown)
    if k[0] != k[1]:
        lines += ["", (f"k differs: {a} ran {k[0]} episodes per task, {b} {k[1]}: each pass@k is its own run's; "
                       "pass@1 and the pass rates compare")]
    others = [f"{found['only_one']} measured in one run only"] if found["only_one"] else []
    others += [f"{found['neither']} measured in neither"] if found["neither"] else []
    lines += ["", (f"tasks: {found['improved']} improved, {found['regressed']} regressed, {found['unchanged']} "
                  f"unchanged{''.join(', ' + x for x in others)}"), ""]
    several = len({t["environment"] for t in found["tasks"]}) > 1
    changed = sorted((t for t in found["tasks"] if t["change"]), key=lambda t: (-abs(t["change"]), t["task_index"]))
    header = [*(["environment"] if several else []), "task", f"pass rate {a}", f"pass rate {b}", "change"]
    rows = [[*([t["environment"]] if several else []), str(t["task_index"]), _pct(t["before"]), _pct(t["after"]),
             f"{100 * t['change']:+.1f}"] for t in changed]
    lines += _table(header, rows, markdown) if rows else ["no task's pass rate changed"]
    return "\n".join(lines) + "\n"
