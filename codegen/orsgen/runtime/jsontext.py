"""JSON text that any UTF-8 file takes. A model can write half of a surrogate pair (`"\\ud83d"` in its tool-call
JSON), which `json.loads` turns into a lone surrogate; such a string cannot be encoded as UTF-8, so every record,
summary and run file orsgen writes goes through `dumps`: each lone surrogate is written as its `\\uXXXX` escape, which
JSON reads back as the same string. Text that leaves as text (the runs-page upload, whose SDK encodes strictly) goes
through `escaped`: the same six characters, shown as they are."""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any, **options: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, **options)`, lone surrogates escaped."""
    return escaped(json.dumps(value, ensure_ascii=False, **options))


def escaped(text: str) -> str:
    """`text` with each lone surrogate written as its `\\uXXXX` escape (the rest unchanged): text any UTF-8 encoder
    takes."""
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
