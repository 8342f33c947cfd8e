"""`orsgen ... --report`: per tool, what the model will see next to the original schema, and what was moved into
the argument text or lost. "What the model sees" is `transformers.utils.get_json_schema` of the generated method,
the function TRL itself calls."""

import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from orsgen.model import Adapter, Param
from orsgen.model.typemap import Converter

JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


def seen_schemas(text: str, adapter: Adapter) -> dict[str, dict[str, Any]]:
    """wire tool name -> get_json_schema(method)["function"], from the generated module itself."""
    try:
        from transformers.utils import get_json_schema
    except ImportError:
        from orsgen.errors import OrsgenError

        raise OrsgenError("--report needs transformers (pip install 'orsgen[train]')") from None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "orsgen_report_module.py"
        path.write_text(text, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        try:
            spec.loader.exec_module(module)
        finally:
            sys.modules.pop(path.stem, None)
    instance = getattr(module, adapter.class_name)()
    return {tool.wire_name: get_json_schema(getattr(instance, tool.py_name))["function"] for tool in adapter.tools}


def _types(found: set[str]) -> list[str] | None:
    """Sorted JSON types, `integer` folded into `number` (which holds every integer)."""
    kept = found & JSON_TYPES
    if "number" in kept:
        kept.discard("integer")
    return sorted(kept) or None


def signature(schema: dict[str, Any], converter: Converter) -> dict[str, Any]:
    """The comparable facts of one property: type, enum, nullable, items, additionalProperties."""
    resolved, _ = converter.resolve(schema, ())
    resolved = resolved if isinstance(resolved, dict) else {}
    members = resolved.get("anyOf") or resolved.get("oneOf") or [resolved]
    members = [converter.resolve(m, ())[0] for m in members]
    nullable = any(isinstance(m, dict) and m.get("type") == "null" for m in members)
    kept = [m for m in members if isinstance(m, dict) and m.get("type") != "null"]
    types, enum = set(), None
    for m in kept:
        t = m.get("type")
        types.update(t if isinstance(t, list) else [t] if t else [])
        if "enum" in m or "const" in m:
            enum = m.get("enum", [m.get("const")])
    if "null" in types:
        types.discard("null")
        nullable = True
    if enum is not None and None in enum:
        nullable, enum = True, [v for v in enum if v is not None]
    one = kept[0] if len(kept) == 1 else {}
    items = converter.resolve(one.get("items"), ())[0] if isinstance(one.get("items"), dict) else None
    return {
        "type": _types(types),
        "enum": enum,
        "nullable": nullable,
        "items": sorted({items.get("type")} - {None}) if isinstance(items, dict) and "type" in items else None,
    }


def seen_signature(prop: dict[str, Any]) -> dict[str, Any]:
    t = prop.get("type")
    types = t if isinstance(t, list) else [t] if t else []
    items = prop.get("items") if isinstance(prop.get("items"), dict) else None
    return {
        "type": _types(set(types) - {"null"}),
        "enum": prop.get("enum"),
        "nullable": bool(prop.get("nullable")) or "null" in types,
        "items": sorted({items.get("type")} - {None}) if items and "type" in items else None,
    }


def compare(original: dict[str, Any] | None, seen: dict[str, Any], params: list[Param]) -> list[str]:
    """Differences a signature should not have: type, enum, nullability, item type, required flag, order."""
    schema = original or {}
    converter = Converter(root=schema)
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    seen_props = seen["parameters"].get("properties", {})
    seen_required = set(seen["parameters"].get("required", []))
    found = []
    if [p.py_name for p in params] != list(seen_props):
        found.append(f"order: {list(props)} -> {list(seen_props)}")
    for param in params:
        before = signature(props.get(param.wire_name, {}), converter)
        after = seen_signature(seen_props.get(param.py_name, {}))
        for key in ("type", "enum", "nullable", "items"):
            if before[key] is not None and before[key] != after[key] and not (key == "nullable" and not before[key]):
                found.append(f"{param.wire_name}: {key} {before[key]} -> {after[key]}")
        if (param.wire_name in required) != (param.py_name in seen_required):
            found.append(f"{param.wire_name}: required {param.wire_name in required} -> {param.py_name in seen_required}")
    return found


def render(text: str, adapter: Adapter, snap: dict[str, Any]) -> tuple[str, int]:
    """(report text, number of differences)."""
    seen = seen_schemas(text, adapter)
    originals = {t["name"]: t.get("input_schema") for t in snap["tools"]}
    lines, differences = [], 0
    for tool in adapter.tools:
        head = f"{tool.wire_name}" + (f"  (attribute {tool.py_name})" if tool.renamed else "")
        lines.append(head)
        diffs = compare(originals.get(tool.wire_name), seen[tool.wire_name], tool.params)
        differences += len(diffs)
        for param in tool.params:
            shown = seen[tool.wire_name]["parameters"]["properties"].get(param.py_name, {})
            shown = {k: v for k, v in shown.items() if k != "description"}
            name = param.wire_name if param.py_name == param.wire_name else f"{param.wire_name} (as {param.py_name})"
            flag = "required" if param.required else "optional"
            lines.append(f"  {name}: {flag}, model sees {_short(shown)}")
            if param.moved:
                lines.append(f"      in its text: {'; '.join(m[:120] for m in param.moved)}")
            if param.hint:
                lines.append(f"      type checkers see: {param.hint}")
        lines += [f"  LOST {item}" for item in tool.lost]
        lines += [f"  DIFFERS {d}" for d in diffs]
    for warning in adapter.warnings():
        lines.append(f"WARNING {warning}")
    summary = (f"{len(adapter.tools)} tools, {sum(len(t.params) for t in adapter.tools)} arguments: "
               f"{differences} differences in type, enum, nullability, item type, required flag or order")
    return "\n".join([*lines, summary]) + "\n", differences


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) < 160 else text[:159] + "…"

