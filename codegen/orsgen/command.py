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
    from orsgen.cli import main as generate

    return generate()
