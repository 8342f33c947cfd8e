"""black.format_str(text, mode=MODE), faster and with the same bytes: what makes generating a 100-tool module take
a second or two instead of five. It leans on black's own normalisers (black is pinned exactly in pyproject.toml)."""

import ast
import functools
import itertools
import math
import re
from typing import Any

import black
from black.numerics import normalize_numeric_literal
from black.strings import (
    normalize_string_prefix,
    normalize_string_quotes,
    normalize_unicode_escape_sequences,
    str_width,
)
from blib2to3.pgen2 import token
from blib2to3.pytree import Leaf

# Fixed: never the user's [tool.black]. Output must be the same on every machine.
MODE = black.Mode(target_versions={black.TargetVersion.PY311}, line_length=120)

# ---- black, faster: the same bytes as black.format_str(text, mode=MODE) ---------------------------------------------
#
# 1. The SNAPSHOT literal (one line of repr, ~70 kB for 100 tools) is most of black's time. Black lays out any JSON
#    value the same way: a bracket's contents stay on one line when the line fits in MODE.line_length, otherwise one
#    element per line (a trailing comma when there are several), recursively. `literal_statement` writes that directly
#    and black sees a one-line placeholder in its place.
# 2. The methods of the adapter class and the TypedDict classes under `if TYPE_CHECKING:` are formatted one by one
#    (black's layout of a def or class depends on nothing around it but its blank lines, and between two such members
#    at depth 1 separated by blank lines only, black always leaves exactly one), through a cache that ignores digits:
#    the 100 tools' methods differ mostly in numbers, so a few black runs make them all. Black sees a one-member
#    placeholder in their place.
# tests/test_generation_speed.py checks the result against black.format_str on every corpus and golden case.

SNAPSHOT_HEAD = "SNAPSHOT: dict[str, Any] = "
_PLACEHOLDER = "__orsgen_snapshot_literal__"
_MEMBERS = "__orsgen_members_{}__"
_MEMBER = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_DIGIT = re.compile("[0-9]")


def format_module(text: str, snap: Any = None) -> str:
    """`black.format_str(text, mode=MODE)`, faster: the SNAPSHOT literal (the line `SNAPSHOT_HEAD + repr(snap)`) is
    laid out without black, and runs of methods and classes are formatted one by one."""
    try:
        return _format_fast(text, snap)
    except Exception:  # noqa: BLE001 - e.g. black cannot parse the text: its own error, about the real lines
        return black.format_str(text, mode=MODE)


def _format_fast(text: str, snap: Any) -> str:
    line = "\n" + SNAPSHOT_HEAD + repr(snap) + "\n"
    at = text.find(line) if snap is not None and _PLACEHOLDER not in text else -1
    literal = literal_statement(SNAPSHOT_HEAD, snap) if at >= 0 and text.find(line, at + 1) < 0 else None
    if literal is None:
        return _format_members(text)
    stub = "\n" + SNAPSHOT_HEAD + _PLACEHOLDER + "\n"
    formatted = _format_members(text[:at] + stub + text[at + len(line) :])
    if formatted.count(stub) != 1:  # black moved or split the placeholder: do it the slow way
        return black.format_str(text, mode=MODE)
    return formatted.replace(stub, "\n" + literal)


def _format_members(text: str) -> str:
    """black.format_str(text), with the members of each run (defs and classes at depth 1, in a top-level class or if
    body, no decorators, one or more blank lines and nothing else between them) but its last formatted one by one."""
    if "\r" in text or "\f" in text or "__orsgen_members_" in text:  # line counting as ast's; placeholders unique
        return black.format_str(text, mode=MODE)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return black.format_str(text, mode=MODE)  # black's own error
    lines = text.split("\n")
    runs = [run for node in tree.body if isinstance(node, (ast.ClassDef, ast.If)) for run in _runs(node.body, lines)]
    if not runs:
        return black.format_str(text, mode=MODE)
    pieces, chunks, last = [], [], 0
    for number, run in enumerate(runs):
        first, end = run[0].lineno - 1, run[-1].end_lineno or 0  # 0-based first line, last line (exclusive)
        pieces.append("\n".join(lines[last:first] + [f"    def {_MEMBERS.format(number)}():", "        pass", ""]))
        chunks.append([_format_member("\n".join(lines[m.lineno - 1 : m.end_lineno]) + "\n") for m in run])
        last = end
    pieces.append("\n".join(lines[last:]))
    formatted = black.format_str("".join(pieces), mode=MODE)
    for number, members in enumerate(chunks):
        stub = f"    def {_MEMBERS.format(number)}():\n        pass\n"
        if formatted.count(stub) != 1 or None in members:
            return black.format_str(text, mode=MODE)
        formatted = formatted.replace(stub, "\n".join(m or "" for m in members))
    return formatted


def _runs(body: list[ast.stmt], lines: list[str]) -> list[list[ast.stmt]]:
    """Runs of at least two members to format one by one; each run's next statement is a member too (kept in place:
    what follows it sees black's state after a real member)."""
    runs: list[list[ast.stmt]] = []
    run: list[ast.stmt] = []
    for node, after in itertools.pairwise(body):
        header = lines[node.lineno - 1]
        gap = lines[(node.end_lineno or 0) : after.lineno - 1]
        if (
            isinstance(node, _MEMBER) and isinstance(after, _MEMBER)
            and not node.decorator_list and not after.decorator_list
            and node.col_offset == 4 and header.startswith("    ") and not header[4].isspace()
            and lines[after.lineno - 1].startswith("    ") and after.col_offset == 4
            and gap and all(not g.strip() for g in gap)
        ):
            run.append(node)
        else:
            if len(run) > 1:
                runs.append(run)
            run = []
    if len(run) > 1:
        runs.append(run)
    return runs


def _format_member(source: str) -> str | None:
    """One member (indented by 4), formatted as black does inside a block; None if it cannot tell."""
    formatted = _format_digitless("class _:\n" + source)
    if not formatted.startswith("class _:\n    "):
        return None
    return formatted[len("class _:\n") :].rstrip("\n") + "\n"


def _format_digitless(source: str) -> str:
    """black.format_str(source): black's layout does not depend on which digits a text holds (only on its widths,
    quotes, backslashes, keywords and comments), so texts that differ in digits only share one black run."""
    if "#" in source:  # comments move with black's joins: the digits' order could change
        return black.format_str(source, mode=MODE)
    digits = _DIGIT.findall(source)
    formatted = _black_cached(_DIGIT.sub("0", source))
    if formatted.count("0") != len(digits):  # black added a digit (e.g. `1.` -> `1.0`): no sharing
        return black.format_str(source, mode=MODE)
    refill = iter(digits)
    return re.sub("0", lambda _: next(refill), formatted)


@functools.lru_cache(maxsize=1024)
def _black_cached(source: str) -> str:
    return black.format_str(source, mode=MODE)


class _NotJSON(Exception):
    pass


def literal_statement(head: str, value: Any) -> str | None:
    """What black makes of the one-line statement `head + repr(value)` at the top level, when value is JSON-like
    (dicts with str keys, lists, str, int, finite float, bool, None); None otherwise."""
    flats: dict[int, str] = {}
    out: list[str] = []
    try:
        _literal_lines(value, 0, head, "", flats, out)
    except (_NotJSON, RecursionError):
        return None
    return "\n".join(out) + "\n"


@functools.lru_cache(maxsize=4096)
def _string(value: str) -> str:
    text = repr(value)
    if "\\" not in text and (text[0] == '"' or '"' not in text):  # what black leaves alone, or only requotes
        return '"' + text[1:-1] + '"'
    leaf = Leaf(token.STRING, text)
    normalize_unicode_escape_sequences(leaf)  # what black's visit_STRING does to a string that is not a docstring
    return normalize_string_quotes(normalize_string_prefix(leaf.value, MODE))


def _flat(value: Any, flats: dict[int, str]) -> str:
    """black's one-line form of value; containers' are kept in flats (by id) for _literal_lines."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if value is None or kind is bool:
        return repr(value)
    if kind is int or kind is float:
        text = repr(value)
        if kind is float and not math.isfinite(value):
            raise _NotJSON
        sign = "-" if text.startswith("-") else ""
        leaf = Leaf(token.NUMBER, text[len(sign) :])
        normalize_numeric_literal(leaf)
        return sign + leaf.value
    if kind is dict:
        if any(type(k) is not str for k in value):
            raise _NotJSON
        text = "{" + ", ".join(f"{_string(k)}: {_flat(v, flats)}" for k, v in value.items()) + "}"
    elif kind is list:
        text = "[" + ", ".join(_flat(v, flats) for v in value) + "]"
    else:
        raise _NotJSON
    flats[id(value)] = text
    return text


def _literal_lines(value: Any, indent: int, head: str, tail: str, flats: dict[int, str], out: list[str]) -> None:
    container = type(value) is dict or type(value) is list
    flat = flats[id(value)] if container and id(value) in flats else _flat(value, flats)
    line = " " * indent + head + flat + tail
    if not container or not value or str_width(line) <= MODE.line_length:
        out.append(line)
        return
    out.append(" " * indent + head + flat[0])
    comma = "," if len(value) > 1 else ""  # black adds the magic trailing comma only where it splits at commas
    if type(value) is dict:
        for key, item in value.items():
            _literal_lines(item, indent + 4, _string(key) + ": ", comma, flats, out)
    else:
        for item in value:
            _literal_lines(item, indent + 4, "", comma, flats, out)
    out.append(" " * indent + flat[-1] + tail)
