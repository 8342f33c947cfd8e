"""The stages joined: (source, snapshot) -> module text. The CLI and the tests both come through here."""

import keyword
from pathlib import Path
from typing import Any

from orsgen import model, naming, normalize, render
from orsgen.errors import OrsgenError
from orsgen.fetch import Source, _snap


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
    adapter = model.build(snap["tools"], name, source.env, snap.get("task_tools"))
    return render.module(adapter, source, snap, command, module_name, template_dir, async_tools), adapter


def from_tools(data: Any, *, env: str = "env", class_name: str | None = None) -> tuple[str, model.Adapter]:
    """Module text for a tool list held in memory (the /tools shape, an MCP list, or a bare list)."""
    tools, rest = normalize.tool_list(data, "<tools>")
    extra = {k: rest[k] for k in ("terminal_tool", "splits") if k in rest}
    source = Source(target="<tools>", url=None, deployment=env, env=env, name=env, split="train")
    return build(source, _snap(env, tools, extra), class_name=class_name)
