"""Stage 5: write atomically. A failed run leaves the previous file exactly as it was."""

import os
import tempfile
from pathlib import Path

from orsgen.errors import OrsgenError


def atomic(path: Path, text: str) -> None:
    parent = path.parent
    if path.is_dir():
        raise OrsgenError(f"cannot write {path}: it is a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OrsgenError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OrsgenError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:  # Ctrl-C: no temporary file left behind either
        Path(tmp).unlink(missing_ok=True)
        raise


def emit(path: Path, text: str, what: str) -> None:
    """Write `text` to `path` unless it already holds it: an unchanged file is not rewritten."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        print(f"{path}: unchanged")
        return
    atomic(path, text)
    print(f"wrote {path}: {what}")
