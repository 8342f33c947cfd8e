"""Descriptions from a server, made safe for a Google docstring that `get_json_schema` parses back.

Server descriptions arrive raw (`fn.__doc__.strip()`, not dedented) and often carry their own `Args:` block.
`get_json_schema` ends the description at any `Args:`/`Returns:`/`Raises:` and reads a trailing `(choices: ...)`
as an enum, so those are neutralised; an embedded `Args:` block is lifted out and used where the schema has
no description for an argument.
"""

import inspect
import re

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises)\s*:\s*$")
_ENTRY = re.compile(r"^(\s*)(\w+)\s*(?:\([^()]*\))?\s*:\s*(.*)$")
_KEYWORDS = re.compile(r"(Args|Returns|Raises):")  # unanchored, exactly what the parser matches
_CHOICES = re.compile(r"\((choices):", re.IGNORECASE)
SPACED_COLON = " :"  # plain ASCII the model reads as a colon; the parser only knows `Args:` and `(choices:`


def split(text: str) -> tuple[str, dict[str, str], str]:
    """(description, documented args, returns text) of a raw server description."""
    lines = inspect.cleandoc(text.expandtabs(4)).splitlines()
    body: list[str] = []
    args: dict[str, str] = {}
    returns: list[str] = []
    section, entry_indent, current = None, None, None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = {"Arguments": "Args", "Parameters": "Args"}.get(m.group(1), m.group(1))
            entry_indent, current = None, None
            if section == "Raises":
                body.append(line)
            continue
        if section == "Args" and line.strip():
            e = _ENTRY.match(line)
            indent = len(line) - len(line.lstrip())
            if e and (entry_indent is None or indent <= entry_indent):
                entry_indent, current = indent, e.group(2)
                args[current] = e.group(3).strip()
                continue
            if current is not None and entry_indent is not None and indent > entry_indent:
                args[current] = f"{args[current]} {line.strip()}".strip()
                continue
            section = None  # not an args block after all: back to prose
        if section == "Returns":
            returns.append(line.strip())
            continue
        body.append(line)
    return "\n".join(body).strip(), args, " ".join(r for r in returns if r)


def neutralise(text: str) -> str:
    """Text `get_json_schema` reads as prose only: no section headers, no `(choices: ...)`."""
    text = _KEYWORDS.sub(lambda m: m.group(1) + SPACED_COLON, text)
    return _CHOICES.sub(lambda m: "(" + m.group(1) + SPACED_COLON, text)


def one_line(text: str) -> str:
    """Whitespace collapsed: argument descriptions must stay on their own line."""
    return neutralise(" ".join(text.split()))


def literal(text: str) -> str:
    """Body of a triple-quoted string literal holding `text` exactly: nothing in it can end the string. A quote is
    escaped only where it could: before another quote, or last (so JSON in a description stays readable)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"' if i + 1 == len(text) or text[i + 1] == '"' else '"')
        elif ch == "\n":
            out.append("\n")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)
