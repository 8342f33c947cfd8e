"""contract: what the environment says of itself, read without a session (the generator's requests): splits, tasks
per split, the first task specs of each (JSON objects), every tool's input schema (a JSON Schema object whose
`required` names described arguments, whose `$ref`s resolve, with known types), a description per tool, names
every OpenAI-compatible API takes; then what the model will see of each tool (the fidelity report of
`orsgen TARGET --report`, when the generator is installed). It picks the split and task the other checks probe."""

from __future__ import annotations

import re
from typing import Any

from orsgen.doctor.arguments import resolved
from orsgen.doctor.check import FAILED, PASSED, WARNING, Check, Facts, names
from orsgen.errors import OrsgenError

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a function name the OpenAI API (and so every endpoint like it) takes
TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}
SPECS_READ = 5  # task specs read per split
CHILDREN = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def run(facts: Facts) -> Check:
    live, server, problems, notes = facts.live, facts.live.server(), [], []
    cautions: list[str] = []
    splits = live.splits()
    if not splits:
        problems.append("it lists no split (list_splits() returns none)")
    counts: dict[str, int] = {}
    for split in splits:
        try:
            counts[split] = server.num_tasks(split)
            specs = server.task_range(split, 0, SPECS_READ)
        except OrsgenError as exc:
            problems.append(f"split {split!r}: its tasks cannot be read: {exc}")
            continue
        odd = [i for i, spec in enumerate(specs) if not isinstance(spec, dict)]
        if odd:
            problems.append(f"split {split!r}: task {odd[0]}'s spec is a {type(specs[odd[0]]).__name__}, not a JSON "
                            "object")
    empty = [s for s in counts if counts[s] == 0]
    usable = [s for s in splits if counts.get(s)]
    if splits and not usable:
        problems.append("no split has a task")
    elif empty:
        notes.append(f"split {', '.join(map(repr, empty))} has no task")
    facts.split = "train" if "train" in usable else (usable[0] if usable else None)
    facts.tasks = counts.get(facts.split or "", 0)
    for tool in facts.tools:
        if not tool.description.strip():
            problems.append(f"tool {tool.name!r} has no description (the model gets only its name)")
        if not NAME.fullmatch(tool.name):
            cautions.append(f"tool name {tool.name!r} is refused by OpenAI-compatible APIs (letters, digits, _ and -, "
                            "at most 64): orsgen's modules rename it, other clients fail")
        problems += [f"tool {tool.name!r}: {p}" for p in schema_problems(tool.schema)]
    if not facts.tools:
        problems.append("it lists no tool")
    seen, fidelity = fidelity_report(facts)
    notes += seen
    tasks = ", ".join(f"{s} {counts[s]}" for s in splits if s in counts)
    summary = (f"{len(splits)} split{'s' if len(splits) != 1 else ''} ({tasks} tasks), {len(facts.tools)} tool"
               f"{'s' if len(facts.tools) != 1 else ''}")
    figures = {"splits": counts, "tools": [t.name for t in facts.tools], "fidelity": fidelity}
    if problems:
        return Check("contract", FAILED, f"{summary}: {problems[0]}" + (f" (and {len(problems) - 1} more)"
                     if len(problems) > 1 else ""), fix=_fix(problems[0]), details=problems + notes, figures=figures)
    cautions += facts.live.notes
    said = f"{summary}: schemas valid, every tool described" + ("" if cautions else ", names safe")
    if fidelity:
        said += (f"; what the model sees: {fidelity['differences']} differences, {fidelity['lost']} schema keys lost "
                 f"(orsgen {facts.live.url if facts.live.served else facts.live.target} --report)")
    if cautions:
        return Check("contract", WARNING, f"{said}; but {cautions[0]}" + (f" (and {len(cautions) - 1} more)" if
                     len(cautions) > 1 else ""), fix=_fix(cautions[0]), details=cautions + notes, figures=figures)
    return Check("contract", PASSED, said, details=notes, figures=figures)


def _fix(problem: str) -> str:
    if "description" in problem:
        return "give each @tool a docstring: it is the tool's description"
    if "split" in problem or "task" in problem:
        return "make list_splits() and list_tasks(split) return the splits and their tasks (JSON objects)"
    if "name" in problem:
        return "name tools with letters, digits, _ and -"
    if "pins other tools" in problem:
        return "regenerate the module (orsgen --check shows how it differs)"
    return "fix the tool's parameter model: its schema is what the model is shown and what the server validates"


def schema_problems(schema: Any) -> list[str]:
    """What makes a tool's input schema no JSON Schema of an argument object: said per place."""
    if schema is None:
        return []  # a tool without arguments
    if not isinstance(schema, dict):
        return [f"its input schema is a {type(schema).__name__}, not a JSON Schema object"]
    found: list[str] = []
    kind = schema.get("type")
    if kind is not None and kind != "object":
        found.append(f"its input schema's type is {kind!r}: tool arguments are an object")
    _walk(schema, schema, "input_schema", found, 0)
    return found


def _walk(node: Any, root: dict[str, Any], path: str, found: list[str], depth: int) -> None:
    if depth > 40 or isinstance(node, bool):
        return
    if not isinstance(node, dict):
        found.append(f"{path} is a {type(node).__name__}, not a schema")
        return
    kinds = node.get("type")
    for kind in kinds if isinstance(kinds, list) else [] if kinds is None else [kinds]:
        if kind not in TYPES:
            found.append(f"{path}: unknown type {kind!r}")
    ref = node.get("$ref")
    if isinstance(ref, str) and "$ref" in resolved(node, root):
        found.append(f"{path}: $ref {ref!r} resolves to nothing")
    properties = node.get("properties")
    if properties is not None and not isinstance(properties, dict):
        found.append(f"{path}.properties is not an object")
        properties = None
    required = node.get("required")
    if required is not None:
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            found.append(f"{path}.required is not a list of names")
        elif properties is not None:
            missing = [r for r in required if r not in properties]
            if missing:
                found.append(f"{path} requires {names(missing)}, which it does not describe")
    for name, child in (properties or {}).items():
        _walk(child, root, f"{path}.{name}", found, depth + 1)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if key in node:
            if not isinstance(node[key], list) or (key != "prefixItems" and not node[key]):
                found.append(f"{path}.{key} is not a list of schemas")
                continue
            for i, child in enumerate(node[key]):
                _walk(child, root, f"{path}.{key}[{i}]", found, depth + 1)
    for key in CHILDREN:
        if key in node:
            _walk(node[key], root, f"{path}.{key}", found, depth + 1)
    for key in ("$defs", "definitions"):
        if isinstance(node.get(key), dict):
            for name, child in node[key].items():
                _walk(child, root, f"{path}.{key}.{name}", found, depth + 1)
    if "enum" in node and not isinstance(node["enum"], list):
        found.append(f"{path}.enum is not a list")


def fidelity_report(facts: Facts) -> tuple[list[str], dict[str, Any]]:
    """(notes, figures): what the model will see of each tool, as `orsgen TARGET --report` says it; nothing when
    the generator (or transformers, which makes what TRL shows) is not installed."""
    try:
        from orsgen import pipeline, report
    except ImportError:
        from orsgen import extras

        return [f"the fidelity report needs the generator: {extras.pip('generator', 'report')}"], {}
    try:
        text, adapter = pipeline.build(facts.live.origin, facts.live.snapshot)
        shown, differences = report.render(text, adapter)
    except OrsgenError as exc:
        return [f"the fidelity report: {exc}"], {}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return [f"the fidelity report could not be made ({type(exc).__name__}: {exc})"], {}
    summary = shown.rstrip().splitlines()[-1]
    lost = re.search(r"(\d+) lost", summary)
    unread = [f"orsgen cannot generate {name!r}: {why}" for name, why in adapter.skipped]
    return unread, {"summary": summary, "differences": differences, "lost": int(lost.group(1)) if lost else 0,
                    "report": shown}
