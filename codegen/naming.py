"""Python identifiers for names that come from a server: sanitised here and nowhere else."""

import builtins
import keyword
import re
import unicodedata

# Names the generated adapter owns. TRL treats every public function of the class as a tool, reserves
# `reset` and `get_reward`, and the episode state lives in plain attributes: a tool may not take any of them.
ADAPTER_NAMES = frozenset({"reset", "get_reward", "reward", "rewards", "metadata", "finished", "last_output"})
# Parameter names the method body itself uses.
PARAM_RESERVED = frozenset({"self"})


def identifier(name: str, *, fallback: str) -> str:
    """An ASCII identifier for `name`: not a keyword, builtin or dunder, never starting with `_`."""
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^0-9A-Za-z_]+", "_", text)
    text = re.sub(r"_+", "_", text).strip("_")
    if not text:
        text = fallback
    if text[0].isdigit():
        text = f"{fallback}_{text}"
    if keyword.iskeyword(text) or keyword.issoftkeyword(text) or hasattr(builtins, text):
        text += "_"
    return text


def unique(base: str, taken: set[str], reserved: frozenset[str] = frozenset()) -> str:
    """`base` (`base_` if reserved), or `base_2`, `base_3`, ...: the first one not in `taken` (which it joins)."""
    if base in reserved:
        base += "_"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def class_name(name: str) -> str:
    """PascalCase class name: `echo` -> `Echo`, `SWE-rebench-V2` -> `SweRebenchV2`, `SETA` -> `Seta`."""
    parts = re.split(r"[^0-9A-Za-z]+", unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode())
    words = [p.capitalize() if p.isupper() or p.islower() else p[0].upper() + p[1:] for p in parts if p]
    text = "".join(words) or "Environment"
    return f"Env{text}" if text[0].isdigit() else text


def module_name(name: str) -> str:
    """snake_case module name for an environment (used for multi-environment output)."""
    return identifier(name.lower(), fallback="env")
