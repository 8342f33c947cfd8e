"""The page itself: the template (page.html, shipped in the package) with the data in a JSON block and a
Content-Security-Policy that allows the page's own style and script (by their hashes) and data: images, nothing else:
no request leaves the page, and a script that text somehow put in it would not run."""

from __future__ import annotations

import base64
import hashlib
import html
import math
import re
from importlib import resources
from typing import Any

from orsgen.runtime import jsontext

# In the JSON block, what could end it or be read as markup becomes its \\u escape (JSON.parse reads it back).
_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")
_BLOCK = re.compile(r"<(style|script)>(.*?)</\1>", re.DOTALL)


def template() -> str:
    return (resources.files("orsgen.view") / "page.html").read_text(encoding="utf-8")


def embedded(data: Any) -> str:
    """`data` as JSON text safe inside a `<script type="application/json">` element."""
    try:
        text = jsontext.dumps(data, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or infinite reward: JSON has no such number, JSON.parse refuses Python's NaN
        text = jsontext.dumps(_finite(data), separators=(",", ":"))
    return _UNSAFE_RE.sub(lambda found: _UNSAFE[found.group()], text)


def _finite(value: Any) -> Any:
    """`value` with each NaN or infinity as its name (a string, which the page shows as it is)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("nan", "NaN").replace("inf", "Infinity")
    if isinstance(value, dict):
        return {key: _finite(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def render(data: dict[str, Any]) -> str:
    page = template()
    hashes: dict[str, list[str]] = {"style": [], "script": []}
    for kind, body in _BLOCK.findall(page):
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        hashes[kind].append(f"'sha256-{digest}'")
    policy = (f"default-src 'none'; script-src {' '.join(hashes['script'])}; style-src {' '.join(hashes['style'])}; "
              "img-src data:; base-uri 'none'; form-action 'none'")
    head, marker, tail = page.partition("@DATA@")
    if not marker:
        raise AssertionError("page.html has its @DATA@ place")
    head = head.replace("@CSP@", html.escape(policy)).replace("@TITLE@", html.escape(str(data.get("title", ""))))
    return head + embedded(data) + tail
