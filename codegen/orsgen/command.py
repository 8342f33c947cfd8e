"""The `orsgen` command: `orsgen serve ...`, `orsgen eval ...` and `orsgen view ...` need only the runtime install
(eval: transformers too, which a training install has); generation needs the generator's extra, and without it
`orsgen` says in one line what to install (`--help` and `--version` still answer)."""

import importlib.util
import os
import sys

from orsgen import __version__

GENERATOR = ("jinja2", "black")  # the `generator` extra
USAGE = """usage: orsgen [TARGET ...] [-o FILE] [--check] [--diff] [--offline] [--report] [options]
       orsgen serve MODULE:CLASS [MODULE:CLASS ...] [--port N] [--host HOST]
       orsgen eval TARGET --model NAME [--base-url URL] [-n N | --tasks SPEC] [-k K] [--out DIR] [options]
       orsgen view PATH... [-o FILE.html]
       orsgen doctor TARGET [--json] [--endpoint URL --model M] [options]
       orsgen replay RECORDS ... --against TARGET [--out FILE] [--json]"""


def main() -> int:
    argv = sys.argv[1:]
    # transformers says "PyTorch was not found..." on import in an install without torch (--report's, eval's): an
    # advice orsgen's commands never need, which would be the one line of noise on their stderr
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if argv[:1] == ["serve"]:
        from orsgen import serve

        return serve.main(argv[1:])
    if argv[:1] == ["eval"]:  # the runtime, openai and transformers: a training install measures too
        from orsgen import evaluate

        return evaluate.main(argv[1:])
    if argv[:1] == ["view"]:  # reads files: no SDK, no generator
        from orsgen import view

        return view.main(argv[1:])
    if argv[:1] in (["doctor"], ["replay"]):  # the runtime: an environment's author checks it with a training install
        from orsgen import doctor, replay

        return (doctor.main if argv[0] == "doctor" else replay.main)(argv[1:])
    missing = [name for name in GENERATOR if importlib.util.find_spec(name) is None]
    if missing:
        return without_generator(argv, missing)
    try:
        from orsgen.cli import main as generate  # black and jinja2: a Ctrl-C may well land here
    except KeyboardInterrupt:
        print("orsgen: interrupted", file=sys.stderr)
        return 130
    return generate()


def without_generator(argv: list[str], missing: list[str]) -> int:
    """A training install: --help and --version answer (what argparse would, first one wins); the rest is refused."""
    from orsgen import extras

    install = f"{extras.pip('generator')} (the generator extra)"
    for arg in argv:
        if arg == "--":
            break
        if arg == "--version":
            print(f"orsgen {__version__}")
            return 0
        if arg in ("-h", "--help"):
            print(USAGE)
            print(f"generating and checking modules needs the generator ({' and '.join(missing)} are not installed "
                  f"here): {install}; orsgen serve, eval, view, doctor and replay need only this install")
            return 0
    print(f"orsgen: error: the generator needs {' and '.join(missing)}: {install} (a training image needs only the "
          "run time)", file=sys.stderr)
    return 2
