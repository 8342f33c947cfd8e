"""`orsgen TARGET -o FILE`, `orsgen --check ...`, and `orsgen` alone for the targets in pyproject.toml.

Arguments only: they become jobs (`config.Job`) and a `pipeline.Mode`, and `pipeline.run` does the rest. Exit codes: 0 done or up to date, 1 stale (with
--check), 2 could not do it (one line on stderr), 130 interrupted.
"""

import argparse
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from orsgen import __version__, config, pipeline, stdout
from orsgen.command import USAGE
from orsgen.errors import OrsgenError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other orsgen error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen --help lists the options)\n")


class _Help(argparse.HelpFormatter):
    """Options wrapped as usual; the epilog's examples kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return text if "\n" in text else super()._fill_text(text, width, indent)


EPILOG = """examples:
  orsgen http://127.0.0.1:8010 -o generated/myenv.py    a server (yours: orsgen serve myenv:MyEnv --port 8010)
  orsgen Eigent/SETA -o generated/seta.py               a catalog environment (needs OPENREWARD_API_KEY)
  orsgen tools.json --env myenv -o generated/myenv.py   a saved URL/myenv/tools response
  orsgen                                                every [tool.orsgen] target of pyproject.toml
  orsgen --check                                        CI: each target against its live server
  orsgen --check --offline                              pre-commit: each module against its own snapshot
tool budgets: --max-output-chars N, --max-output-tokens N --tokenizer NAME, --truncate head|tail|middle,
  --max-images N, --episode-timeout S, --max-tool-calls N, --tool-budget TOOL:KEY=VALUE (KEY: timeout, a cap)
environment: OPENREWARD_API_KEY (catalog targets; used, never written), OPENREWARD_SESSION_URL (their server)
exit codes: 0 done or up to date, 1 stale (--check), 2 bad input or unreachable server, 130 interrupted
"""


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="orsgen",
        usage=USAGE.removeprefix("usage: "),  # the commands too: serve, eval, view, doctor, replay
        allow_abbrev=False,
        add_help=False,
        formatter_class=lambda prog: _Help(prog, max_help_position=28, width=110),
        description="Generate a typed adapter module for an ORS environment, for TRL's GRPOTrainer; each command has "
        "its --help.",
        epilog=EPILOG,
    )
    p.add_argument("-h", "--help", action="help", help=argparse.SUPPRESS)
    p.add_argument(
        "targets",
        metavar="TARGET",
        nargs="*",
        help="server URL, catalog owner/name, /tools JSON file, or orsgen module (its snapshot); with several "
        "(or several --env), -o is a folder: one module each plus bundle.py",
    )
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="the module to write, or a folder")
    config.add_arguments(p)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the output is not up to date")
    p.add_argument("--diff", action="store_true", help="with --check: print the whole unified diff too")
    p.add_argument("--offline", action="store_true", help="each [tool.orsgen] target from its module's own snapshot, "
                   "no request (pre-commit)")
    p.add_argument("--report", action="store_true", help="what the model sees of each tool and argument, what was "
                   "lost (-o optional)")
    p.add_argument("--format", choices=("text", "markdown"), default="text", help="--report as text or markdown")
    p.add_argument("--config", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"orsgen {__version__}", help=argparse.SUPPRESS)
    return p


def jobs(args: argparse.Namespace) -> list[config.Job]:
    envs = args.env or []
    if not args.targets:
        if args.output or envs or args.class_name:
            raise OrsgenError("-o, --env and --class-name go with a TARGET")
        if args.task_tools_from or args.task_tools_for_all or args.secret:  # per environment: pyproject.toml says
            raise OrsgenError("--task-tools-from, --task-tools-for-all and --secret go with a TARGET; for pyproject "
                              "targets set task-tools-from, task-tools-for-all or secret in their table")
        given = [o for o in config.BUDGET_OPTIONS if getattr(args, o.field) is not None]  # budgets: per environment
        if given:
            key = "tools.TOOL.KEY" if given[0].kind is dict else given[0].name
            raise OrsgenError(f"{given[0].flag} goes with a TARGET; for pyproject targets set {key} in their table")
        listed = config.load(args.config or config.find(Path.cwd()))
        return [replace(j, templates=args.templates or j.templates, pin_tasks=args.pin_tasks or j.pin_tasks,
                        async_tools=args.async_tools or j.async_tools, offline=args.offline) for j in listed]
    if args.offline and not all(pipeline.is_module(t) for t in args.targets):  # a module TARGET: offline already
        raise OrsgenError("--offline goes without TARGET, or with orsgen modules: it checks modules against their "
                          "own snapshots, sending no request")
    output = args.output
    if output is None and len(args.targets) == 1 and not envs and not args.report and pipeline.is_module(args.targets[0]):
        output = Path(args.targets[0])  # a module knows its own target: itself, from its own snapshot
    if output is None and not args.report:
        for target in args.targets:  # `orsgen generated/shpo.py`: a typo, not a missing -o
            pipeline.exists(target)
        raise OrsgenError("give the output module with -o FILE")
    output = Path(os.path.normpath(output or "adapter.py"))
    if len(args.targets) == 1 and len(envs) <= 1:
        return [replace(job_of(args.targets[0], output, envs[0] if envs else None, args), class_name=args.class_name,
                        root=config.project_root(output), found_root=True)]
    if output.suffix == ".py" or args.class_name:
        raise OrsgenError("with several environments, -o is a directory and --class-name cannot be used")
    if len(args.targets) > 1 and envs:
        raise OrsgenError("--env picks environments of one TARGET; give either several TARGETs or several --env")
    pairs = [(args.targets[0], e) for e in envs] if envs else [(t, None) for t in args.targets]
    twice = sorted({p for p in pairs if pairs.count(p) > 1}, key=str)
    if twice:
        raise OrsgenError(f"environment {twice[0][1] or twice[0][0]} is given twice")
    return pipeline.several([job_of(target, output, env, args) for target, env in pairs], output)


def job_of(target: str, output: Path, env: str | None, args: argparse.Namespace) -> config.Job:
    """A command-line job: the target's options from the flags."""
    budgets = config.budgets({o.name: getattr(args, o.field) for o in config.BUDGET_OPTIONS}, "", flags=True)
    return config.Job(target, output, env, None, args.templates, args.task_tools_from, args.task_tools_for_all,
                      tuple(args.secret or ()), args.pin_tasks, args.async_tools, **config.budget_fields(budgets))


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # a write outside `stdout.say` (argparse's): quiet all the same, exit 1 as Python's docs
        stdout.silence()
        return 1
    except KeyboardInterrupt:  # outputs are replaced atomically: nothing was half-written
        print("orsgen: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - a bug of orsgen's: exit 2 ("could not"), never --check's 1, and no secret
        print(scrubbed(traceback.format_exc()), end="", file=sys.stderr)
        print("orsgen: error: internal error (the traceback above, secrets masked): please report it", file=sys.stderr)
        return 2
    finally:  # --help's exit too: a reader gone (`| head`) is silenced here, not a traceback at shutdown
        stdout.flush()


def scrubbed(text: str) -> str:
    """`text` without the value of OPENREWARD_API_KEY or of any environment variable a --secret or a pyproject
    `secret` names, in any of the spellings a traceback gives it (as is, stripped, repr'd, as bytes)."""
    for name in sorted({"OPENREWARD_API_KEY", *_SECRETS}):
        value = os.environ.get(name, "")
        spellings = {value, value.strip(), repr(value)[1:-1], repr(value.encode("utf-8", "replace"))[2:-1]}
        for spelling in sorted(spellings, key=len, reverse=True):
            if len(spelling) >= 4:  # a shorter value would mask half the traceback, and is no key
                text = text.replace(spelling, "***")
    return text


_SECRETS: set[str] = set()  # the names of the secrets of this run: --secret's, then its jobs'


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    _SECRETS.clear()
    _SECRETS.update(args.secret or ())
    try:
        todo = jobs(args)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    _SECRETS.update(name for job in todo for name in job.secret)
    mode = pipeline.Mode(args.check, args.diff, args.format if args.report else None,
                         report_only=args.report and args.output is None and bool(args.targets))
    status, members, failed = 0, [], []
    for job in todo:
        try:
            done, adapter = pipeline.run(job, mode)
        except OrsgenError as exc:  # the other targets are still generated or checked
            print(f"orsgen: error: {job.output}: {exc}" if len(todo) > 1 else f"orsgen: error: {exc}", file=sys.stderr)
            failed.append(job.output.as_posix())
            continue
        status = max(status, done)
        if adapter is not None:
            members.append((job.output.stem, adapter.class_name))
    try:
        if any(job.fetched is not None for job in todo) and not failed:
            status = max(status, pipeline.write_bundle(todo[0].output.parent, members, mode, todo[0].templates))
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    if failed:
        if len(todo) > 1:
            print(f"orsgen: error: could not {'check' if args.check else 'generate'} {', '.join(failed)}",
                  file=sys.stderr)
        return 2
    return status
