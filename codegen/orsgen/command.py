"""The `orsgen` command: says in one line what to install when the generator's extra is missing (a training
install has only the runtime)."""

import importlib.util
import sys

GENERATOR = ("jinja2", "black")  # the `generator` extra


def main() -> int:
    missing = [name for name in GENERATOR if importlib.util.find_spec(name) is None]
    if missing:
        print(f"orsgen: error: the generator needs {' and '.join(missing)}: pip install \"orsgen[generator]\" (a "
              "training image needs only the run time)", file=sys.stderr)
        return 2
    try:
        from orsgen.cli import main as generate  # black and jinja2: a Ctrl-C may well land here
    except KeyboardInterrupt:
        print("orsgen: interrupted", file=sys.stderr)
        return 130
    return generate()
