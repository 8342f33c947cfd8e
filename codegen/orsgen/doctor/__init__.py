"""`orsgen doctor TARGET`: is an environment fit to train on? A battery of checks against the live environment, one
line each, in this order (each hands what it learnt to the next, `Facts`):

    contract -> tools answer -> bad arguments -> isolation -> determinism -> [learnable] -> reward probes
             -> lifecycle -> latency and size

TARGET is a URL, a catalog name, a generated module, or MODULE:CLASS (served on 127.0.0.1 for the check: target.py).
Every check is bounded in time and in sessions (`Probe.bounded`) and closes what it opened; the sessions open as
training opens them (probe.py: the runtime's own path). Exit 0: every check passed (warnings allowed); 1: a check
failed; 2: the doctor could not run (or a check could not). `--json` prints one document instead of the lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import NoReturn

from orsgen.doctor import calls, contract, determinism, isolation, learnable, lifecycle, rewards
from orsgen.doctor.check import ERROR, FAILED, PASSED, SKIPPED, WARNING, Check, Facts, tools_of
from orsgen.doctor.probe import Bound, Probe, StartFailed
from orsgen.doctor.target import Live, resolve
from orsgen.errors import OrsgenError

SCHEMA = "orsgen.doctor/1"
SESSIONS = 64  # at most, per check
SHOWN = {PASSED: "passed", WARNING: "warning", FAILED: "FAILED", SKIPPED: "skipped", ERROR: "ERROR"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen doctor --help lists the options)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="orsgen doctor", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Check a live ORS environment before anyone trains on it: its contract, that its tools "
                "answer and refuse bad arguments, isolation between sessions, determinism, rewards a trivial policy "
                "earns, its lifecycle, latency and output sizes.",
                epilog="examples:\n  orsgen doctor myenv:MyEnv                 serve it on 127.0.0.1 and check it\n"
                "  orsgen doctor http://127.0.0.1:8010 --json\n  orsgen doctor generated/seta.py --endpoint "
                "http://127.0.0.1:8001/v1 --model Qwen/Qwen3-4B\nexit codes: 0 every check passed, 1 a check failed, "
                "2 could not run")
    p.add_argument("target", metavar="TARGET", help="a URL, a catalog owner/name, a generated module, or "
                   "MODULE:CLASS (served on 127.0.0.1 for the check, from the current folder)")
    p.add_argument("--env", metavar="NAME", help="one environment of a server (or bundle) that has several")
    p.add_argument("--json", action="store_true", help="print one JSON document (schema orsgen.doctor/1)")
    p.add_argument("-v", "--verbose", action="store_true", help="each check's details under its line")
    p.add_argument("--timeout", type=_seconds, default=10.0, metavar="S", help="seconds a start, call or close may "
                   "take (default 10); a check stops after 6 times that")
    p.add_argument("--sessions", type=_count, default=4, metavar="N", help="sessions at once for isolation "
                   "(default 4)")
    p.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible endpoint: the learnable check runs "
                   "orsgen eval on it")
    p.add_argument("--model", metavar="M", help="the model the endpoint serves (with --endpoint)")
    p.add_argument("-n", "--num-tasks", type=_count, default=8, metavar="N", help="tasks the model runs (default 8)")
    p.add_argument("-k", "--rollouts", type=_count, default=4, metavar="K", help="episodes per task (default 4)")
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 3600:
        raise argparse.ArgumentTypeError(f"seconds above 0, not {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {text!r}")
    return int(text)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if bool(args.endpoint) != bool(args.model):
        print("orsgen: error: --endpoint and --model go together: the endpoint and the model it serves",
              file=sys.stderr)
        return 2
    began = time.monotonic()
    try:
        live = resolve(args.target, args.env)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("orsgen doctor: interrupted", file=sys.stderr)
        return 130
    try:
        return _doctor(args, live, began)
    except KeyboardInterrupt:
        print("orsgen doctor: interrupted (every session it opened was closed)", file=sys.stderr)
        return 130
    finally:
        live.close()


def _doctor(args: argparse.Namespace, live: Live, began: float) -> int:
    facts = Facts(live, Probe(live, args.timeout), tools_of(live.snapshot))
    steps: list[tuple[str, Callable[[Facts], Check]]] = [
        ("contract", contract.run), ("tools answer", calls.answer), ("bad arguments", calls.bad),
        ("isolation", lambda f: isolation.run(f, args.sessions)), ("determinism", determinism.run)]
    if args.endpoint:
        steps.append(("learnable", lambda f: learnable.run(f, args.endpoint, args.model, args.num_tasks,
                                                           args.rollouts)))
    steps += [("reward probes", rewards.run), ("lifecycle", lifecycle.run), ("latency and size", lifecycle.latency)]
    if not args.json:
        print(f"orsgen doctor: {live.name} at {live.where} ({len(facts.tools)} tool{'s' * (len(facts.tools) != 1)})", flush=True)
    checks: list[Check] = []
    try:
        for name, step in steps:
            check = _run(name, step, facts, bound=6 * args.timeout)
            checks.append(check)
            if not args.json:
                print(f"  {SHOWN[check.status]:<8} {check.name:<17} {check.line()}", flush=True)
                if args.verbose:
                    print("".join(f"      {line}\n" for line in check.details), end="", flush=True)
    finally:
        facts.probe.close_all()
    code = 1 if any(c.status == FAILED for c in checks) else 2 if any(c.status == ERROR for c in checks) else 0
    spent = facts.probe.spent
    seconds = time.monotonic() - began
    if args.json:
        print(json.dumps({"schema": SCHEMA, "target": live.target, "environment": live.name, "url": live.url,
                          "exit": code, "seconds": round(seconds, 3), "sessions": {"opened": spent.opened,
                          "closed": spent.closed}, "checks": [c.json() for c in checks]}, indent=1))
    else:
        counts = {s: sum(1 for c in checks if c.status == s) for s in SHOWN}
        said = ", ".join(f"{n} {SHOWN[s].lower()}" for s, n in counts.items() if n)
        closed = "all closed" if spent.opened == spent.closed else f"{spent.closed} closed"
        print(f"orsgen doctor: {said} in {seconds:.1f} s; {spent.opened} sessions, {closed}")
    return code


def _run(name: str, step: Callable[[Facts], Check], facts: Facts, bound: float) -> Check:
    """One check within its bounds; what stopped it said in its line."""
    began, opened = time.monotonic(), facts.probe.spent.opened
    try:
        with facts.probe.bounded(bound, SESSIONS):
            check = step(facts)
    except Bound as exc:
        check = Check(name, WARNING, f"stopped at {exc} ({bound:g} s, {SESSIONS} sessions) before it could judge",
                      fix="a slow environment: give a longer --timeout")
    except StartFailed as exc:
        check = Check(name, FAILED, str(exc), fix="make the task start (setup() and get_prompt() must not raise or "
                      "hang)")
    except Exception as exc:  # noqa: BLE001 - one check that could not run does not stop the others
        traceback.print_exc(file=sys.stderr)
        check = Check(name, ERROR, f"could not run: {type(exc).__name__}: {exc}")
    check.seconds, check.sessions = time.monotonic() - began, facts.probe.spent.opened - opened
    return check
