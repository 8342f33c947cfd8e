"""`orsgen TARGET -o FILE`: argument plumbing only; the stages live in their own modules."""

import argparse
import os
import sys
from pathlib import Path

from orsgen import __version__, model, pipeline, write
from orsgen.errors import OrsgenError
from orsgen.fetch import fetch


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="orsgen",
        description="Generate a typed Python adapter module for an ORS environment, for TRL's GRPOTrainer.",
    )
    p.add_argument("target", metavar="TARGET", help="server URL, catalog name owner/name, or a /tools JSON file")
    p.add_argument("-o", "--output", required=True, type=Path, help="the module to write, e.g. generated/env.py")
    p.add_argument("--env", help="environment on a multi-environment server (default: the first one)")
    p.add_argument("--class-name", help="adapter class name (default: the environment's name in PascalCase)")
    p.add_argument("--templates", type=Path, help="directory of templates that shadow the built-in ones")
    p.add_argument("--version", action="version", version=f"orsgen {__version__}")
    return p


def generate(args: argparse.Namespace) -> tuple[str, model.Adapter]:
    source, snap = fetch(args.target, args.env)
    command = " ".join(
        ["orsgen", args.target]
        + (["--env", args.env] if args.env else [])
        + (["--class-name", args.class_name] if args.class_name else [])
        + ["-o", os.path.normpath(args.output).replace(os.sep, "/")]
    )
    return pipeline.build(
        source,
        snap,
        class_name=args.class_name,
        command=command,
        module_name=_module_name(args.output),
        template_dir=args.templates,
    )


def _module_name(output: Path) -> str:
    parts = Path(os.path.normpath(output)).with_suffix("").parts
    dotted = [p for p in parts if p not in (".",)]
    return ".".join(dotted) if all(p.isidentifier() for p in dotted) else output.stem


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        text, adapter = generate(args)
        for warning in adapter.warnings():
            print(f"orsgen: warning: {warning}", file=sys.stderr)
        write.atomic(args.output, text)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    names = ", ".join(t.wire_name for t in adapter.tools)
    print(f"wrote {args.output}: class {adapter.class_name}, {len(adapter.tools)} tools ({names})")
    return 0
