"""The stages joined: (source, snapshot) -> module text. The CLI and the tests both come through here."""

import ast
import contextlib
import keyword
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import black
import jinja2

from orsgen import model, normalize, render
from orsgen.builtin import templates
from orsgen.errors import OrsgenError
from orsgen.model import naming
from orsgen.source import Source, _snap, scoring


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
    with template_errors(template_dir):
        text = render.module(adapter, source, snap, command, module_name, template_dir, async_tools)
    twice = _bound_twice(text)
    if twice:
        raise OrsgenError(f"the module would bind {', '.join(twice)} twice (a class or tool name takes a name the "
                          "module uses): choose another --class-name")
    return text, adapter


def bundle(members: list[tuple[str, str]], template_dir: Path | None = None) -> str:
    with template_errors(template_dir):
        return render.bundle(members, template_dir)


def check_templates(folder: Path) -> None:
    """A --templates folder must exist and shadow built-in templates only (a typo would be silently ignored)."""
    if not folder.is_dir():
        raise OrsgenError(f"--templates {folder}: no such directory")
    builtin = {p.name for p in templates().iterdir() if p.name.endswith(".jinja")}
    unknown = sorted(p.name for p in folder.iterdir() if p.name.endswith(".jinja") and p.name not in builtin)
    if unknown:
        raise OrsgenError(f"--templates {folder}: {unknown[0]} shadows no built-in template "
                          f"(they are {', '.join(sorted(builtin))})")


@contextlib.contextmanager
def template_errors(template_dir: Path | None) -> Iterator[None]:
    """A template that does not render, or renders invalid Python, is one line naming the template and its line."""
    try:
        yield
    except jinja2.TemplateSyntaxError as exc:
        raise OrsgenError(f"template {exc.filename or exc.name}, line {exc.lineno}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        where = next((f"template {f.filename}, line {f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__))
                      if f.filename.endswith(".jinja")), "a template")
        raise OrsgenError(f"{where}: {type(exc).__name__}: {exc}") from None
    except (black.InvalidInput, SyntaxError) as exc:
        line = " ".join(str(exc).split())
        origin = f"the templates in {template_dir}" if template_dir else "the built-in templates"
        raise OrsgenError(f"{origin} render invalid Python: {line[:200]}") from None


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
    extra.update(scoring(rest))
    source = Source(target="<tools>", url=None, deployment=env, env=env, name=env, split="train")
    return build(source, _snap(env, tools, extra), class_name=class_name)
