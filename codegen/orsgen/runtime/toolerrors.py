"""What the model is shown of a failed tool call: one short line, pydantic's validation errors as `field: message`,
no URLs, reprs or the SDK's session ids."""

from __future__ import annotations

import ast
import asyncio
import re

from orsgen.runtime import client
from orsgen.runtime.errors import ToolError

# One pydantic error in a validation error list's repr: its location and message, whatever follows (a `ctx` holding
# `ValueError(...)`, a URL) and whatever the list around it holds, which `ast.literal_eval` cannot always read.
_FIELD = re.compile(r"""'loc':\s*\((?P<loc>[^()]*)\),\s*'msg':\s*(?P<msg>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# The same in pydantic's ValidationError text: "field\n  message [type=..., input_value=...]".
_TEXT_FIELD = re.compile(r"^(?P<loc>[^\s\[][^\n]*)\n[ \t]+(?P<msg>[^\n\[]+?)\s*\[type=", re.MULTILINE)
# The SDK's session context in its errors' text: "(environment session sid=...)", "session terminated (sid='...')".
_SID = re.compile(r"\s*\((?:(?:environment|sandbox) session )?sid=[^()]*\)")
_URL = re.compile(r"\s*(?:for further information visit\s*)?\(?(?:https?://|www\.)\S+", re.IGNORECASE)
MAX_FIELDS, MAX_FIELD, MAX_ERROR = 6, 160, 400  # what a model is shown of a failed call, at most


def _validation_errors(detail: str) -> list[str]:
    """`field: message` per error of a pydantic validation error in a tool's error text ([] if there is none)."""
    found = [(_loc(m["loc"]), _literal(m["msg"])) for m in _FIELD.finditer(detail)]
    found = found or [(m["loc"].strip(), m["msg"]) for m in _TEXT_FIELD.finditer(detail)]
    lines = [short(f"{loc or 'input'}: {msg}", MAX_FIELD) for loc, msg in found]
    if len(lines) > MAX_FIELDS:
        lines = [*lines[:MAX_FIELDS], f"and {len(lines) - MAX_FIELDS} more"]
    return lines


def _loc(text: str) -> str:
    """A location tuple's repr (`'items', 0, 'name',`) as a dotted path: items.0.name."""
    try:
        parts = ast.literal_eval(f"({text},)" if text.strip() and not text.strip().endswith(",") else f"({text})")
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        parts = [_literal(p.strip()) for p in text.split(",") if p.strip()]
    return ".".join(str(p) for p in parts)


def _literal(text: str) -> str:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text.strip("'\"")
    return str(value)


def short(text: str, limit: int = MAX_ERROR) -> str:
    """One line without URLs or the SDK's session ids, at most `limit` characters."""
    line = " ".join(text[: limit * 50].split())  # spaces first: the patterns stay linear
    line = " ".join(_SID.sub("", _URL.sub("", line)).split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def failures() -> tuple[type[BaseException], ...]:
    """What a tool call can fail with: the tool's own error, the SDK's and the transport's, a timeout."""
    from aiohttp import ClientError
    from openreward.api.errors import OpenRewardError

    return (OpenRewardError, ClientError, OSError, TimeoutError, asyncio.TimeoutError)


def tool_error(name: str, exc: BaseException) -> ToolError:
    from openreward.api.errors import ToolCallError

    if isinstance(exc, ToolCallError):
        fields = _validation_errors(exc.detail)
        if fields:  # what the model can act on: one short sentence per field, no pydantic dicts or URLs
            return ToolError(f"{name}: invalid arguments: {'; '.join(fields)}")
        if exc.reason == "input_validation" or "[{" in exc.detail:  # a list it could not read: no repr for the model
            head = short(exc.detail.split("[{", 1)[0]).rstrip(" :.") or "the server rejected them"
            return ToolError(short(f"{name}: invalid arguments: {head}"))
        return ToolError(short(f"{name} failed ({exc.reason}): {exc.detail}"))
    return ToolError(short(f"{name} failed: {client.describe(exc)}"))

