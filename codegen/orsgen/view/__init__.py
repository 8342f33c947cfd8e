"""`orsgen view PATH... [-o FILE.html]`: one self-contained HTML page of a run, to look at instead of reading JSONL.

`inputs` reads an `orsgen eval` folder, a training run's trajectory files (or their folder), or two eval folders;
`data` makes what the page shows of them (the figures through `orsgen.evaluate.figures`, so the page says what
summary.json says); `page` puts that into the template, `page.html`: its style and script inline, the data a JSON
block the script reads, every string shown as text. Needs neither a server nor the openreward SDK; the page makes
no request when opened.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from orsgen.errors import OrsgenError

if TYPE_CHECKING:
    from orsgen.view.inputs import Inputs

PAGE = "report.html"  # beside report.md in an eval folder
EPILOG = """examples:
  orsgen view runs/base                        an orsgen eval folder (writes runs/base/report.html)
  orsgen view runs/seta -o seta.html           a training run's trajectories-rank*.jsonl (every rank's file)
  orsgen view runs/base runs/trained -o c.html two eval folders: task by task, before and after
exit codes: 0 written, 2 bad input
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen view --help lists the options)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="orsgen view", allow_abbrev=False, epilog=EPILOG,
                formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=30,
                                                                                  width=110),
                description="Write one self-contained HTML page of a run: its figures, each task and tool, every "
                "episode's conversation.\nIt opens from disk in any browser and makes no request.")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="an orsgen eval folder; training trajectory "
                   "files or the folder holding them; or two eval folders")
    p.add_argument("-o", "--out", type=Path, metavar="FILE", help="the page (default: FOLDER/report.html for one eval "
                   "folder, else ./view.html)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        from orsgen.view import inputs

        found = inputs.read(args.paths)
        out = args.out or (args.paths[0] / PAGE if found.kind == "eval" else Path("view.html"))
        if out.resolve() in {f.resolve() for s in found.sources for f in s.files}:
            raise OrsgenError(f"-o {out}: that is one of the records it reads")
        size, episodes = write(found, out)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    print(f"orsgen view: {out} ({episodes} episodes, {_size(size)})", file=sys.stderr)
    return 0


def write(found: Inputs, out: Path) -> tuple[int, int]:
    """Build the page of `found` and write it to `out` atomically: its size in bytes, its episodes."""
    from orsgen.view import data, page
    from orsgen.write import atomic

    made = data.page(found)
    text = page.render(made)
    atomic(out, text)
    return len(text.encode("utf-8")), sum(len(run["episodes"]) for run in made["runs"])


def beside(folder: Path) -> Path | None:
    """The page of an `orsgen eval` folder, written to FOLDER/report.html once its summary.json is; its path, said
    on stderr (or one line saying why there is none: the run's figures are written already, and stand)."""
    from orsgen.view import inputs

    out = folder / PAGE
    try:
        size, _ = write(inputs.read([folder]), out)
    except OrsgenError as exc:
        print(f"orsgen eval: no {out}: {exc}", file=sys.stderr)
        return None
    except Exception as exc:  # noqa: BLE001 - a bug of the page's must not fail a measurement already saved
        print(f"orsgen eval: no {out}: internal error: {type(exc).__name__}: {exc}: please report it (orsgen view "
              f"{folder} shows the traceback)", file=sys.stderr)
        return None
    print(f"orsgen eval: {out} ({_size(size)}): open it in a browser", file=sys.stderr)
    return out


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.0f} kB"
