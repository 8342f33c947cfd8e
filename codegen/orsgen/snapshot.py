"""The pin: a canonical JSON form of what was fetched, and its sha256.

Keys are sorted everywhere except in `properties` maps, whose order is the order of the generated parameters.
"""

import hashlib
import json
from typing import Any

from orsgen.runtime.bounds import canonical  # the runtime compares live tools in the same form

FORMAT = 1


def dumps(snap: dict[str, Any]) -> str:
    try:
        return json.dumps(snap, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:  # NaN/Infinity: not JSON, and not reproducible
        raise ValueError(f"the schema holds a value JSON cannot carry ({exc})") from exc


def sha256(snap: dict[str, Any]) -> str:
    return hashlib.sha256(dumps(snap).encode("utf-8")).hexdigest()


def make(env: str | None, tools: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    """The snapshot: env name, tools, and what else the server said about them (terminal tool, splits)."""
    return canonical({"format": FORMAT, "env": env, "tools": tools, **extra})
