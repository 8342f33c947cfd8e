"""Python identifiers for names that come from a server: sanitised here and nowhere else."""

import builtins
import keyword
import re
import unicodedata

from orsgen import builtin
from orsgen.runtime.adapter import Adapter

# Names the runtime's adapter class owns (methods, settings, episode state). TRL treats every public function of the
# class as a tool and reserves `reset` and `get_reward`: a tool may not take any of them.
ADAPTER_NAMES = frozenset(
    name
    for cls in Adapter.__mro__
    for name in [*vars(cls), *getattr(cls, "__annotations__", {})]
    if not name.startswith("_")
)


def _template_names() -> frozenset[str]:
    """Names the module template binds at the top level: read from the template itself, so none is missed."""
    text = (builtin.templates() / "module.py.jinja").read_text(encoding="utf-8")
    bound = re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=", text, re.MULTILINE)
    bound += re.findall(r"^(?:def|class) ([A-Za-z_]\w*)\b", text, re.MULTILINE)
    bound += re.findall(r"^import (\w+)", text, re.MULTILINE)
    bound += re.findall(r"^from \S+ import (\w+)$", text, re.MULTILINE)
    return frozenset(bound)


# Names a generated module defines or imports at the top level: an adapter class may not take one.
MODULE_NAMES = (
    _template_names()
    | frozenset({"TYPE_CHECKING", "Any", "Literal", "NotRequired", "TypedDict", "Required"})
    | frozenset(dir(builtins))
)
# A method defined in the class body shadows module names for the methods after it (their annotations and
# defaults are evaluated in the class scope): tool attributes must not take a name the class body refers to.
TOOL_RESERVED = ADAPTER_NAMES | MODULE_NAMES
# Parameter names the method body itself uses.
PARAM_RESERVED = frozenset({"self"})


def identifier(name: str, *, fallback: str) -> str:
    """An ASCII identifier for `name`: not a keyword, never starting with `_` (TRL hides those from the model).
    Builtin names are kept: a parameter called `format` or `id` shadows nothing the method body uses."""
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^0-9A-Za-z_]+", "_", text)
    text = re.sub(r"_+", "_", text).strip("_")
    if not text:
        text = fallback
    if text[0].isdigit():
        text = f"{fallback}_{text}"
    if keyword.iskeyword(text):
        text += "_"
    return text


def parameter(name: str) -> str:
    """A parameter identifier. `get_json_schema` ends the `Args:` block at any "Returns:" or "Raises:", so a name
    ending in those words gets a trailing underscore."""
    text = identifier(name, fallback="arg")
    return text + "_" if text.endswith(("Args", "Returns", "Raises")) else text


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
    if text[0].isdigit():
        return f"Env{text}"
    return f"{text}Env" if keyword.iskeyword(text) or text in MODULE_NAMES else text


def module_name(name: str) -> str:
    """snake_case module name for an environment (used for multi-environment output)."""
    return identifier(name.lower(), fallback="env")
