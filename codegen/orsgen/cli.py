"""`orsgen TARGET -o FILE`, `orsgen --check ...`, and `orsgen` alone for the targets in pyproject.toml.

Argument plumbing only: the stages live in their own modules. Exit codes: 0 done or up to date, 1 stale (with
--check), 2 could not do it (one line on stderr), 130 interrupted.
"""

import argparse
import difflib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from orsgen import __version__, config, model, pin, pipeline, report, write
from orsgen.errors import OrsgenError
from orsgen.model import naming
from orsgen.render import formatter_note
from orsgen.source import Probe, Source, fetch
from orsgen.source import tasks as fetch_tasks


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other orsgen error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen --help lists the options)\n")


class _Help(argparse.HelpFormatter):
    """Options wrapped as usual; the epilog's examples kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return text if "\n" in text else super()._fill_text(text, width, indent)


EPILOG = """examples:
  orsgen http://127.0.0.1:8000 -o generated/myenv.py    a self-hosted server (--env NAME: one of several)
  orsgen Eigent/SETA -o generated/seta.py               a catalog environment (needs OPENREWARD_API_KEY)
  orsgen tools.json --env myenv -o generated/myenv.py   a saved URL/myenv/tools response
  orsgen                                                every [tool.orsgen] target of pyproject.toml
  orsgen --check                                        CI: each target against its live server
  orsgen --check --offline                              pre-commit: each module against its own snapshot
environment: OPENREWARD_API_KEY (catalog targets; used, never written), OPENREWARD_SESSION_URL (their server)
exit codes: 0 done or up to date, 1 stale (--check), 2 bad input or unreachable server, 130 interrupted
"""


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="orsgen",
        allow_abbrev=False,
        formatter_class=lambda prog: _Help(prog, max_help_position=28, width=110),
        description="Generate a typed Python adapter module for an ORS environment, for TRL's GRPOTrainer. "
        "With no TARGET: every [tool.orsgen] target of the nearest pyproject.toml.",
        epilog=EPILOG,
    )
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
    p.add_argument("--report", action="store_true", help="what the model sees of each tool and argument, what went "
                   "into text, what was lost (-o optional)")
    p.add_argument("--format", choices=("text", "markdown"), default="text", help="--report as text or markdown")
    p.add_argument("--config", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"orsgen {__version__}")
    return p


def jobs(args: argparse.Namespace) -> list[config.Job]:
    envs = args.env or []
    if not args.targets:
        if args.output or envs or args.class_name:
            raise OrsgenError("-o, --env and --class-name go with a TARGET")
        if args.task_tools_from or args.task_tools_for_all or args.secret:  # per environment: pyproject.toml says
            raise OrsgenError("--task-tools-from, --task-tools-for-all and --secret go with a TARGET; for pyproject "
                              "targets set task-tools-from, task-tools-for-all or secret in their table")
        listed = config.load(args.config or config.find(Path.cwd()))
        return [replace(j, templates=args.templates or j.templates, pin_tasks=args.pin_tasks or j.pin_tasks,
                        async_tools=args.async_tools or j.async_tools, offline=args.offline) for j in listed]
    if args.offline:
        raise OrsgenError("--offline goes without TARGET: it checks the [tool.orsgen] targets' modules against their "
                          "own snapshots (a module TARGET is offline already)")
    output = args.output
    if output is None and len(args.targets) == 1 and not envs and not args.report and _is_module(args.targets[0]):
        output = Path(args.targets[0])  # a module knows its own target: itself, from its own snapshot
    if output is None and not args.report:
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
    found: list[config.Job] = []
    names: set[str] = set()
    root = config.project_root(output / "bundle.py")
    for target, env in pairs:
        if _is_module(target):  # an orsgen module: its embedded snapshot, offline
            embedded = pin.read(Path(target))
            source, snap = embedded.source, embedded.snapshot
        else:
            source, snap = fetch(target, env, probe(job_of(target, output, env, args), require_task_tools=False))
        name = naming.unique(naming.module_name(source.env or source.name), names, BUNDLE_NAMES)
        if any(job.fetched[0] == source for job in found):
            raise OrsgenError(f"environment {source.env or source.deployment} of {target} is given twice")
        found.append(replace(job_of(target, output / f"{name}.py", env, args), fetched=(source, snap), root=root,
                             found_root=True))
    return found


def _is_module(target: str) -> bool:
    return target.endswith(".py") and Path(target).is_file()


def validate(job: config.Job) -> None:
    """Input that cannot be right, refused before any request."""
    if job.output.suffix == ".py" and not job.output.stem.isidentifier():
        fix = naming.identifier(job.output.stem, fallback="adapter")
        raise OrsgenError(f"{job.output}: {job.output.stem!r} is not an importable module name (use {fix}.py)")
    if job.templates is not None:
        pipeline.check_templates(job.templates)


def job_of(target: str, output: Path, env: str | None, args: argparse.Namespace) -> config.Job:
    """A command-line job: the target's options from the flags."""
    return config.Job(target, output, env, None, args.templates, args.task_tools_from, args.task_tools_for_all,
                      tuple(args.secret or ()), args.pin_tasks, args.async_tools)


def probe(job: config.Job, require_task_tools: bool = True) -> Probe:
    """What a job's generation reads beyond /tools; --secret values come from the environment, never a file."""
    if job.task_tools_for_all and not job.task_tools_from:
        raise OrsgenError("--task-tools-for-all goes with --task-tools-from TASKS (the tasks whose tools every task gets)")
    missing = [name for name in job.secret if name not in os.environ]
    if missing:
        raise OrsgenError(f"--secret {missing[0]}: set the environment variable {missing[0]} (its value is sent as "
                          "the secret of that name when a session opens, and never written)")
    for name in ("api_key", "OPENREWARD_API_KEY"):
        if name in job.secret:
            print(f"orsgen: warning: --secret {name}: the openreward SDK sends the API key as the secret {name}, "
                  "replacing yours, at generation and at run time; pass the value as OPENREWARD_API_KEY (or the "
                  "adapter's api_key=) instead", file=sys.stderr)
    secrets = {name: os.environ[name] for name in job.secret}
    return Probe(job.task_tools_from, job.task_tools_for_all, secrets, require_task_tools)


def render(job: config.Job) -> tuple[str, model.Adapter, dict[str, Any], Source]:
    """(module text, adapter model) for a job; a `.py` target is regenerated from its embedded snapshot, offline."""
    async_tools, templates = job.async_tools, job.templates
    if job.fetched is not None:
        (source, snap), class_name, command = job.fetched, None, job.command()
        source = _as_named(job, source) if not _is_module(job.target) else source
    elif job.target.endswith(".py"):
        pinned = pin.read(Path(job.target))
        source, snap, class_name = pinned.source, pinned.snapshot, pinned.class_name
        recorded = pin.option(pinned.command, "--templates")
        if templates is None and recorded is not None:
            templates = Path(recorded)
            if not templates.is_dir():
                raise OrsgenError(f"{job.target} was made with --templates {recorded}, not found here: pass --templates DIR")
        shown = Path(job._shown(job.output))
        command = pin.retarget(pinned.command, shown, templates=templates and Path(job._shown(templates)),
                               class_name=job.class_name)
        async_tools = async_tools or pinned.async_tools
    else:
        if job.offline:  # what this orsgen makes of the module's own snapshot: catches hand edits and generator drift
            pinned = pin.read(job.output)
            source, snap, class_name = pinned.source, pinned.snapshot, pinned.class_name
        else:
            source, snap = fetch(job.target, job.env, probe(job))
            class_name = job.class_name
        source, command = _as_named(job, source), job.command()
    text, adapter = pipeline.build(
        source,
        snap,
        class_name=job.class_name or class_name,
        command=command,
        module_name=_module_name(job.output if job.root is None else Path(job._shown(job.output))),
        template_dir=templates,
        async_tools=async_tools,
    )
    return text, adapter, snap, source


def _as_named(job: config.Job, source: Source) -> Source:
    """A file TARGET as the project names it (relative to its root), however it was spelled, from any folder."""
    if job.root is None or not Path(job.target).exists():
        return source
    return replace(source, target=job._shown(job.target))


def tasks_path(output: Path) -> Path:
    return output.with_name(output.stem + ".tasks.json")


def pinned_tasks(job: config.Job, source: Source, snap: dict[str, Any]) -> str:
    """The task list --pin-tasks writes beside the module, as text."""
    if source.url is None and "/" not in source.deployment:
        raise OrsgenError(f"--pin-tasks needs a server or catalog TARGET, not {job.target}")
    splits = [s if isinstance(s, str) else s.get("name") for s in snap.get("splits") or [source.split]]
    pinned = fetch_tasks(source, [s for s in splits if isinstance(s, str)])
    return json.dumps(pinned, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def check(output: Path, text: str, show_diff: bool, pinned: bool = True, root: Path | None = None) -> int:
    if not output.is_file():
        raise OrsgenError(f"cannot check {output}: no such file")
    old = output.read_text(encoding="utf-8")
    if old == text:
        print(f"{output}: up to date")
        return 0
    builds = [_build_line(old), _build_line(text)]
    if builds[0] != builds[1] and old == text.replace(builds[1], builds[0], 1):
        print(f"{output}: up to date, but the server's build changed ({builds[0]} -> {builds[1]}): the tools are the "
              "same, tasks, prompts or rewards may not be; regenerate to pin the new build")
        return 0
    changes = pin.tool_changes(pin.read(output).snapshot, pin.read_text(text).snapshot) if pinned else []
    print(f"{output}: stale")  # (pin.read above: not an orsgen module means it cannot be checked, exit 2)
    for line in changes or ["the generated code differs (a new orsgen, templates or options)"]:
        print(f"  {line}")
    fix = text.splitlines()[1].removeprefix("#").strip() if pinned else "the command that wrote this directory"
    if pinned and root is not None and Path(root).resolve() != Path.cwd().resolve():
        fix += f"   (in {Path(root).resolve().as_posix()})"  # the header's paths are relative to the project
    print(f"  fix: {fix}" + ("" if show_diff else "   (--diff shows the whole difference)"))
    note = formatter_note()
    if note:
        print(f"  {note}")
    if show_diff:
        path = output.as_posix()
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), path, f"{path} (new)"))
    return 1


def _build_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.startswith("BUILD_SHA")), "")


def check_tasks(path: Path, text: str) -> int:
    """--check of a pinned task list: the first task that differs, per split."""
    if not path.is_file():
        raise OrsgenError(f"cannot check {path}: no such file (write it with --pin-tasks)")
    old, new = json.loads(path.read_text(encoding="utf-8")), json.loads(text)
    if old == new:
        print(f"{path}: up to date")
        return 0
    print(f"{path}: stale")
    before, after = old.get("splits", {}), new.get("splits", {})
    for split in sorted(set(before) | set(after)):
        a, b = before.get(split, []), after.get(split, [])
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"  split {split!r}: task {first} differs ({len(a)} tasks pinned, {len(b)} on the server)")
    return 1


def emit(path: Path, text: str, what: str) -> None:
    """Write `text` to `path` unless it already holds it: an unchanged file is not rewritten."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        print(f"{path}: unchanged")
        return
    write.atomic(path, text)
    print(f"wrote {path}: {what}")


def summary(adapter: model.Adapter) -> str:
    names = ", ".join(t.wire_name for t in adapter.tools)
    text = f"class {adapter.class_name}, {len(adapter.tools)} tools ({names})"
    for variant in adapter.variants:
        extra = ", ".join(t.wire_name for t in variant.tools)
        text += f"; class {variant.class_name} adds {extra} for tasks {_ranges(variant.tasks)}"
    if adapter.unread:
        text += (f"; tasks {adapter.unread_spans()} were not read (--task-tools-from): they get class "
                 f"{adapter.class_name}, the shared tools only")
    if adapter.to_all:
        text += f"; every task gets {', '.join(adapter.to_all)} (--task-tools-for-all)"
    if adapter.terminal_tool:
        text += f"; terminal tool {adapter.terminal_tool.get('name')} (terminal_reward)"
    return text


def _ranges(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:8])
    return shown + (f", ... ({len(indices)} tasks)" if len(indices) > 8 else "")


BUNDLE_NAMES = frozenset({"bundle"})


def write_bundle(directory: Path, members: list[tuple[str, str]], args: argparse.Namespace,
                 templates: Path | None) -> int:
    """bundle.py: every environment's adapter as TRL's dict environment_factory, and one mixed dataset."""
    path = directory / "bundle.py"
    text = pipeline.bundle(members, templates)
    if args.check:
        return check(path, text, args.diff, pinned=False)
    emit(path, text, f"environments {', '.join(name for name, _ in members)}")
    package = directory / "__init__.py"
    if not package.exists():  # a package, so that bundle.py's relative imports resolve (and type checkers follow)
        write.atomic(package, "")
    return 0


def _module_name(output: Path) -> str:
    parts = output.with_suffix("").parts
    return ".".join(parts) if not output.is_absolute() and all(p.isidentifier() for p in parts) else output.stem


def run(job: config.Job, args: argparse.Namespace) -> tuple[int, model.Adapter | None]:
    """Generate, check or report one job: (exit status, its adapter if it belongs in a bundle)."""
    validate(job)
    text, adapter, snap, source = render(job)
    for warning in adapter.warnings():
        print(f"orsgen: warning: {warning}", file=sys.stderr)
    if args.report:
        print(report.render(text, adapter, snap, fmt=args.format)[0], end="")
        if args.output is None and args.targets:
            return 0, None
    if args.check:
        status = check(job.output, text, args.diff, root=job.root)
        if job.pin_tasks and not job.offline:  # offline: the tasks are the server's, not this orsgen's
            status = max(status, check_tasks(tasks_path(job.output), pinned_tasks(job, source, snap)))
        return status, adapter
    emit(job.output, text, summary(adapter))
    if job.pin_tasks and not job.offline:
        tasks = pinned_tasks(job, source, snap)
        emit(tasks_path(job.output), tasks,
             ", ".join(f"{len(v)} {k} tasks" for k, v in json.loads(tasks)["splits"].items()))
    unread = [name for name, why in adapter.skipped if why.startswith(model.UNREADABLE)]
    if unread:  # the rest is written: one broken tool does not cost the others
        print(f"orsgen: error: {job.output}: {len(unread)} tool(s) could not be generated ({', '.join(map(repr, unread))}: "
              "see the warnings); the others were written", file=sys.stderr)
        return 2, adapter
    return 0, adapter


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # outputs are replaced atomically: nothing was half-written
        print("orsgen: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        todo = jobs(args)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    status, members, failed = 0, [], []
    for job in todo:
        try:
            done, adapter = run(job, args)
        except OrsgenError as exc:  # the other targets are still generated or checked
            print(f"orsgen: error: {job.output}: {exc}" if len(todo) > 1 else f"orsgen: error: {exc}", file=sys.stderr)
            failed.append(job.output.as_posix())
            continue
        status = max(status, done)
        if adapter is not None:
            members.append((job.output.stem, adapter.class_name))
    try:
        if any(job.fetched is not None for job in todo) and not failed:
            status = max(status, write_bundle(todo[0].output.parent, members, args, todo[0].templates))
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    if failed:
        if len(todo) > 1:
            print(f"orsgen: error: could not {'check' if args.check else 'generate'} {', '.join(failed)}",
                  file=sys.stderr)
        return 2
    return status
