"""The one walk over the stack every reading of TRL makes: frames outwards from a start, at most a depth, and what
may be read of one. Reading a frame's f_locals makes Python keep a copy of them in the frame while it runs (3.11/3.12):
locals are read only where a trainer can be (TRL's own frames and methods), never elsewhere, so a caller's objects
(an adapter it deletes) are not held alive."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

DEPTH = 64  # frames searched above a reset: TRL's call chain from train() to reset() is about 10 deep


def frames(start: Any, depth: int = DEPTH) -> Iterator[Any]:
    """`start` and the frames that called it, outwards, at most `depth` of them."""
    frame = start
    for _ in range(depth):
        if frame is None:
            return
        yield frame
        frame = frame.f_back


def find(start: Any, wanted: Callable[[Any], bool], depth: int = DEPTH) -> Any | None:
    """The first frame from `start` outwards that is `wanted`, else None."""
    return next((frame for frame in frames(start, depth) if wanted(frame)), None)


def method(code: Any) -> bool:
    """A method's frame (its first argument is `self`): one whose locals may be read."""
    return bool(code.co_argcount) and code.co_varnames[0] == "self"


def owner(frame: Any) -> Any | None:
    """The `self` of a method's frame (None for any other frame: its locals are not read)."""
    return frame.f_locals.get("self") if method(frame.f_code) else None


def of_trl(frame: Any) -> bool:
    """A frame of TRL's own code."""
    return str(frame.f_globals.get("__name__", "")).split(".")[0] == "trl"


def from_trl(cls: type) -> bool:
    """A class of TRL's, or one derived from one."""
    return any(str(getattr(c, "__module__", "")).split(".")[0] == "trl" for c in getattr(cls, "__mro__", ()))


def in_trl(start: Any) -> bool:
    """TRL's code is on the stack above `start`."""
    return find(start, of_trl) is not None


def named(frame: Any, name: str) -> bool:
    """A frame of TRL's function or method `name`."""
    return frame.f_code.co_name == name and str(frame.f_globals.get("__name__", "")).startswith("trl.")


def attr(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def has(obj: Any, path: str) -> bool:
    try:
        attr(obj, path)
    except AttributeError:
        return False
    return True
