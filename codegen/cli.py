"""`orsgen TARGET -o FILE`, `orsgen --check ...`, and `orsgen` alone for the targets in pyproject.toml.

Argument plumbing only: the stages live in their own modules. Exit codes: 0 done or up to date, 1 stale (with
--check), 2 could not do it (one line on stderr).
"""

import argparse
import difflib
import os
import sys
from pathlib import Path
from typing import Any

from orsgen import __version__, config, model, pin, pipeline, report, write
from orsgen.errors import OrsgenError
from orsgen.fetch import fetch


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="orsgen",
        description="Generate a typed Python adapter module for an ORS environment, for TRL's GRPOTrainer. "
        "With no TARGET, every target in [tool.orsgen] of ./pyproject.toml.",
    )
    p.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        help="server URL, catalog name owner/name, a /tools JSON file, or an orsgen module (its embedded snapshot)",
    )
    p.add_argument("-o", "--output", type=Path, help="the module to write, e.g. generated/env.py")
    p.add_argument("--env", help="environment on a multi-environment server (default: the first one)")
    p.add_argument("--class-name", help="adapter class name (default: the environment's name in PascalCase)")
    p.add_argument("--templates", type=Path, help="directory of templates that shadow the built-in ones, by file")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the output is not up to date")
    p.add_argument("--report", action="store_true", help="print what the model will see of each tool next to the "
                   "original schema, and what went into argument text or was lost (-o optional)")
    p.add_argument("--config", type=Path, default=Path("pyproject.toml"), help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"orsgen {__version__}")
    return p


def jobs(args: argparse.Namespace) -> list[config.Job]:
    if args.target is None:
        if args.output or args.env or args.class_name:
            raise OrsgenError("-o, --env and --class-name go with a TARGET")
        found = config.load(args.config)
        return [config.Job(j.target, j.output, j.env, j.class_name, args.templates or j.templates) for j in found]
    if args.output is None and not args.report:
        raise OrsgenError("give the output module with -o FILE")
    output = Path(os.path.normpath(args.output or "adapter.py"))
    return [config.Job(args.target, output, args.env, args.class_name, args.templates)]


def render(job: config.Job) -> tuple[str, model.Adapter, dict[str, Any]]:
    """(module text, adapter model) for a job; a `.py` target is regenerated from its embedded snapshot, offline."""
    if job.target.endswith(".py"):
        pinned = pin.read(Path(job.target))
        source, snap, class_name, command = pinned.source, pinned.snapshot, pinned.class_name, pinned.command
    else:
        source, snap = fetch(job.target, job.env)
        class_name, command = job.class_name, job.command()
    text, adapter = pipeline.build(
        source,
        snap,
        class_name=job.class_name or class_name,
        command=command,
        module_name=_module_name(job.output),
        template_dir=job.templates,
    )
    return text, adapter, snap


def check(job: config.Job, text: str) -> int:
    if not job.output.is_file():
        raise OrsgenError(f"cannot check {job.output}: no such file")
    old = job.output.read_text(encoding="utf-8")
    if old == text:
        print(f"{job.output}: up to date")
        return 0
    before = pin.read(job.output)  # not an orsgen module: exit 2, it cannot be checked
    after = pin.read_text(text)
    print(f"{job.output}: stale")
    for line in pin.tool_changes(before.snapshot, after.snapshot):
        print(f"  {line}")
    path = job.output.as_posix()
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), path, f"{path} (new)"))
    return 1


def _module_name(output: Path) -> str:
    parts = output.with_suffix("").parts
    return ".".join(parts) if not output.is_absolute() and all(p.isidentifier() for p in parts) else output.stem


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    status = 0
    try:
        for job in jobs(args):
            text, adapter, snap = render(job)
            for warning in adapter.warnings():
                print(f"orsgen: warning: {warning}", file=sys.stderr)
            if args.report:
                print(report.render(text, adapter, snap)[0], end="")
                if args.output is None and args.target is not None:
                    continue
            if args.check:
                status = max(status, check(job, text))
            else:
                write.atomic(job.output, text)
                names = ", ".join(t.wire_name for t in adapter.tools)
                print(f"wrote {job.output}: class {adapter.class_name}, {len(adapter.tools)} tools ({names})")
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    return status
