"""`python -m examples.regen PORT [orsgen arguments]`: run orsgen while the example environment is served on
127.0.0.1:PORT. With no arguments orsgen regenerates the [tool.orsgen] targets; `--check` checks them (CI).

The port is fixed so that the URL pinned in the committed example module stays the same.
"""

import sys

from orsgen.cli import main as orsgen

from examples import serve


def main(argv: list[str]) -> int:
    port, *arguments = argv
    with serve.running("examples.echo:Echo", port=int(port)):
        return orsgen(arguments)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
