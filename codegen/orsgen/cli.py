"""`orsgen TARGET -o FILE`, `orsgen --check ...`, and `orsgen` alone for the targets in pyproject.toml.

Argument plumbing only: the stages live in their own modules. Exit codes: 0 done or up to date, 1 stale (with
--check), 2 could not do it (one line on stderr).
"""

import argparse
import difflib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from orsgen import __version__, config, model, pin, pipeline, report, write
from orsgen.errors import OrsgenError
from orsgen.model import naming
from orsgen.render import bundle as render_bundle
from orsgen.source import Source, fetch
from orsgen.source import tasks as fetch_tasks


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="orsgen",
        allow_abbrev=False,
        description="Generate a typed Python adapter module for an ORS environment, for TRL's GRPOTrainer. "
        "With no TARGET, every target in [tool.orsgen] of ./pyproject.toml.",
    )
    p.add_argument(
        "targets",
        metavar="TARGET",
        nargs="*",
        help="server URL, catalog name owner/name, a /tools JSON file, or an orsgen module (its embedded snapshot); "
        "with several (or several --env), -o is a directory: one module each plus bundle.py for training on all",
    )
    p.add_argument("-o", "--output", type=Path, help="the module to write (e.g. generated/env.py), or a directory")
    config.add_arguments(p)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the output is not up to date")
    p.add_argument("--report", action="store_true", help="print what the model will see of each tool next to the "
                   "original schema, and what went into argument text or was lost (-o optional)")
    p.add_argument("--config", type=Path, default=Path("pyproject.toml"), help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"orsgen {__version__}")
    return p


def jobs(args: argparse.Namespace) -> list[config.Job]:
    envs = args.env or []
    if not args.targets:
        if args.output or envs or args.class_name:
            raise OrsgenError("-o, --env and --class-name go with a TARGET")
        listed = config.load(args.config)
        return [replace(j, templates=args.templates or j.templates, pin_tasks=args.pin_tasks or j.pin_tasks,
                        async_tools=args.async_tools or j.async_tools) for j in listed]
    if args.output is None and not args.report:
        raise OrsgenError("give the output module with -o FILE")
    output = Path(os.path.normpath(args.output or "adapter.py"))
    if len(args.targets) == 1 and len(envs) <= 1:
        return [config.Job(args.targets[0], output, envs[0] if envs else None, args.class_name, args.templates,
                           args.task_tools_from, args.pin_tasks, args.async_tools)]
    if output.suffix == ".py" or args.class_name:
        raise OrsgenError("with several environments, -o is a directory and --class-name cannot be used")
    if len(args.targets) > 1 and envs:
        raise OrsgenError("--env picks environments of one TARGET; give either several TARGETs or several --env")
    pairs = [(args.targets[0], e) for e in envs] if envs else [(t, None) for t in args.targets]
    found: list[config.Job] = []
    names: set[str] = set()
    for target, env in pairs:
        source, snap = fetch(target, env, args.task_tools_from)
        name = naming.unique(naming.module_name(source.env or source.name), names, BUNDLE_NAMES)
        found.append(config.Job(target, output / f"{name}.py", env, None, args.templates, args.task_tools_from,
                                args.pin_tasks, args.async_tools, fetched=(source, snap)))
    return found


def render(job: config.Job) -> tuple[str, model.Adapter, dict[str, Any], Source]:
    """(module text, adapter model) for a job; a `.py` target is regenerated from its embedded snapshot, offline."""
    async_tools = job.async_tools
    if job.fetched is not None:
        (source, snap), class_name, command = job.fetched, None, job.command()
    elif job.target.endswith(".py"):
        pinned = pin.read(Path(job.target))
        source, snap, class_name, command = pinned.source, pinned.snapshot, pinned.class_name, pinned.command
        async_tools = async_tools or pinned.async_tools
    else:
        source, snap = fetch(job.target, job.env, job.task_tools_from)
        class_name, command = job.class_name, job.command()
    text, adapter = pipeline.build(
        source,
        snap,
        class_name=job.class_name or class_name,
        command=command,
        module_name=_module_name(job.output),
        template_dir=job.templates,
        async_tools=async_tools,
    )
    return text, adapter, snap, source


def pin_tasks(job: config.Job, source: Source, snap: dict[str, Any]) -> None:
    if source.url is None and "/" not in source.deployment:
        raise OrsgenError(f"--pin-tasks needs a server or catalog TARGET, not {job.target}")
    splits = [s if isinstance(s, str) else s.get("name") for s in snap.get("splits") or [source.split]]
    pinned = fetch_tasks(source, [s for s in splits if isinstance(s, str)])
    path = job.output.with_name(job.output.stem + ".tasks.json")
    write.atomic(path, json.dumps(pinned, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}: " + ", ".join(f"{len(v)} {k} tasks" for k, v in pinned["splits"].items()))


def check(output: Path, text: str, pinned: bool = True) -> int:
    if not output.is_file():
        raise OrsgenError(f"cannot check {output}: no such file")
    old = output.read_text(encoding="utf-8")
    if old == text:
        print(f"{output}: up to date")
        return 0
    changes = pin.tool_changes(pin.read(output).snapshot, pin.read_text(text).snapshot) if pinned else []
    print(f"{output}: stale")  # (pin.read above: not an orsgen module means it cannot be checked, exit 2)
    for line in changes:
        print(f"  {line}")
    path = output.as_posix()
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), path, f"{path} (new)"))
    return 1


BUNDLE_NAMES = frozenset({"bundle"})


def write_bundle(directory: Path, members: list[tuple[str, str]], check_only: bool, templates: Path | None) -> int:
    """bundle.py: every environment's adapter as TRL's dict environment_factory, and one mixed dataset."""
    path = directory / "bundle.py"
    text = render_bundle(members, templates)
    if check_only:
        return check(path, text, pinned=False)
    write.atomic(path, text)
    package = directory / "__init__.py"
    if not package.exists():  # a package, so that bundle.py's relative imports resolve (and type checkers follow)
        write.atomic(package, "")
    print(f"wrote {path}: environments {', '.join(name for name, _ in members)}")
    return 0


def _module_name(output: Path) -> str:
    parts = output.with_suffix("").parts
    return ".".join(parts) if not output.is_absolute() and all(p.isidentifier() for p in parts) else output.stem


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    status = 0
    try:
        todo = jobs(args)
        members = []
        for job in todo:
            text, adapter, snap, source = render(job)
            for warning in adapter.warnings():
                print(f"orsgen: warning: {warning}", file=sys.stderr)
            if args.report:
                print(report.render(text, adapter, snap)[0], end="")
                if args.output is None and args.targets:
                    continue
            members.append((job.output.stem, adapter.class_name))
            if args.check:
                status = max(status, check(job.output, text))
            else:
                write.atomic(job.output, text)
                names = ", ".join(t.wire_name for t in adapter.tools)
                print(f"wrote {job.output}: class {adapter.class_name}, {len(adapter.tools)} tools ({names})")
                if job.pin_tasks:
                    pin_tasks(job, source, snap)
        if any(job.fetched is not None for job in todo):
            status = max(status, write_bundle(todo[0].output.parent, members, args.check, todo[0].templates))
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    return status
