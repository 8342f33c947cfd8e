"""Regenerate the committed example adapter: `python -m orsgen.testing.regen PORT OUTPUT [orsgen options]`.

The example environment is served on a fixed port so that the URL pinned in the committed module is stable.
"""

import sys

from orsgen import cli
from orsgen.testing import serve


def main(argv: list[str]) -> int:
    port, output, *options = argv
    with serve.running("orsgen.examples.echo:Echo", port=int(port)) as server:
        return cli.main([server.url, "-o", output, *options])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
