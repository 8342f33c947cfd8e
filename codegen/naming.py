"""Python identifiers for names that come from a server: sanitised here and nowhere else."""

import builtins
import keyword
import re
import unicodedata

# Names the generated adapter owns. TRL treats every public function of the class as a tool, reserves
# `reset` and `get_reward`, and the episode state lives in plain attributes: a tool may not take any of them.
ADAPTER_NAMES = frozenset({
    "reset", "get_reward", "reward", "rewards", "metadata", "finished", "last_output", "task_index",
    "prompt_mismatch", "group_size", "task_seed", "open_in_background",
})
# A method defined in the class body shadows module names for the methods after it (their annotations and
# defaults are evaluated in the class scope): tool attributes must not take a name the class body refers to.
TOOL_RESERVED = ADAPTER_NAMES | frozenset(dir(builtins)) | frozenset({"UNSET", "Any", "Literal"})
# Names a generated module defines or imports at the top level: an adapter class may not take one.
MODULE_NAMES = frozenset({
    "Any", "Literal", "NotRequired", "TypedDict", "Callable", "Mapping", "Sequence", "Environment", "ToolError",
    "DriftError", "ENVIRONMENTS", "SNAPSHOT", "UNSET", "TYPE_CHECKING",
}) | frozenset(dir(builtins))
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
