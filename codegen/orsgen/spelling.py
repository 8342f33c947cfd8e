"""A file name the user mistyped: the file beside it that it most likely meant, for the line that refuses it."""

import difflib
from pathlib import Path


def did_you_mean(path: Path) -> str:
    """`did you mean gen/shop.py? ` for `gen/shpo.py` when gen/shop.py exists (same suffix, a close name), else ""."""
    siblings = [p.name for p in path.parent.glob(f"*{path.suffix}")] if path.parent.is_dir() else []
    close = difflib.get_close_matches(path.name, siblings, n=1, cutoff=0.8)
    return f"did you mean {(path.parent / close[0]).as_posix()}? " if close else ""
