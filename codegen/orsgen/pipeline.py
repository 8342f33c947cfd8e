"""The stages joined: (source, snapshot) -> module text. The CLI and the tests both come through here."""

import ast
import keyword
from pathlib import Path
from typing import Any

from orsgen import model, normalize, render
from orsgen.errors import OrsgenError
from orsgen.model import naming
from orsgen.source import Source, _snap


def build(
    source: Source,
    snap: dict[str, Any],
    *,
    class_name: str | None = None,
    command: str = "",
    module_name: str = "adapter",
    template_dir: Path | None = None,
    async_tools: bool = False,
) -> tuple[str, model.Adapter]:
    name = class_name or naming.class_name(source.name)
    if not name.isidentifier() or name.startswith("_") or keyword.iskeyword(name) or name in naming.MODULE_NAMES:
        raise OrsgenError(f"class name {name!r} is not a public Python identifier the module can use")
    adapter = model.build(snap["tools"], name, source.env, snap.get("task_tools"), snap.get("terminal_tool"))
    text = render.module(adapter, source, snap, command, module_name, template_dir, async_tools)
    twice = _bound_twice(text)
    if twice:
        raise OrsgenError(f"the module would bind {', '.join(twice)} twice (a class or tool name takes a name the "
                          "module uses): choose another --class-name")
    return text, adapter


def _bound_twice(text: str) -> list[str]:
    """Top-level names the module binds more than once: one would replace the other."""
    seen: dict[str, int] = {}
    for node in ast.parse(text).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        for name in names:
            seen[name] = seen.get(name, 0) + 1
    return sorted(n for n, count in seen.items() if count > 1)


def from_tools(data: Any, *, env: str = "env", class_name: str | None = None) -> tuple[str, model.Adapter]:
    """Module text for a tool list held in memory (the /tools shape, an MCP list, or a bare list)."""
    tools, rest = normalize.tool_list(data, "<tools>")
    extra: dict[str, Any] = {k: rest[k] for k in ("terminal_tool", "splits") if k in rest}
    source = Source(target="<tools>", url=None, deployment=env, env=env, name=env, split="train")
    return build(source, _snap(env, tools, extra), class_name=class_name)
