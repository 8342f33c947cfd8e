"""The tasks played by hand against the served environment: for each, calls made of the task's metadata values, the
prompt's words and each enum's choices, one session each, until one earns a reward of 1.0; the best is the episode
the tiny model learns."""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from orsgen.tiny.model import SAY_EVERY, Lesson, conversation

CALLS = 200  # calls tried at most per task
WORDS = 12  # candidate strings per argument at most
REPLY_CHARS = 60  # the final assistant turn: the tool's result, cut to this


@dataclass
class Played:
    """One task's best call: the conversation the model learns, what the environment gave, how many calls it took."""

    task: int
    prompt: str
    name: str
    arguments: dict[str, Any]
    result: str
    reward: float | None
    tried: int
    tools: list[dict[str, Any]]

    def lesson(self) -> Lesson:
        return conversation(self.prompt, self.name, self.arguments, self.result[:REPLY_CHARS]), self.tools

    def line(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return (f"  task {self.task}: {self.name}({shown}) -> reward {self.reward} ({self.tried} call"
                f"{'s' * (self.tried != 1)} tried)")


def words_of(prompt: str, row: dict[str, Any]) -> list[str]:
    """The strings a call may be made of: the task's metadata values first, then the prompt's words."""
    found = [str(v) for k, v in row.items() if k not in ("prompt", "task_index", "split", "environment")
             and isinstance(v, str | int) and not isinstance(v, bool)]
    found += re.findall(r"[\w.@+-]+", prompt)
    return list(dict.fromkeys(w for w in found if w))[:WORDS]


def candidates(schema: dict[str, Any], words: Sequence[str], row: dict[str, Any] | None = None,
               name: str = "") -> list[Any]:
    """Values to try for an argument `name` of JSON schema `schema` (its `$ref`s resolved): each enum choice, the
    words for a string (the task's metadata value of the same name first), the numbers among them (or the bounds) for
    a number, combinations of the required fields of an object, one item of an array. [] when nothing fits."""
    named = [str(v) for k, v in (row or {}).items() if name and _key(k) == _key(name) and isinstance(v, str | int)]
    words = list(dict.fromkeys([*named, *words]))
    if "enum" in schema:  # the task's own value first, when it is one of them
        return sorted(schema["enum"], key=lambda choice: str(choice) not in named)
    if "const" in schema:
        return [schema["const"]]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branches = [b for b in schema[key] if isinstance(b, dict) and b.get("type") != "null"]
            return next((found for b in branches if (found := candidates(b, words, row, name))), [])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "string":
        return list(words) or ["x"]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", -math.inf), schema.get("maximum", math.inf)
        numbers = [int(w) for w in words if re.fullmatch(r"-?[0-9]+", w)]
        found = [n for n in dict.fromkeys([*numbers, schema.get("default", 1), 0, 1]) if isinstance(n, int | float)
                 and not isinstance(n, bool) and low <= n <= high]
        return found or [low if math.isfinite(low) else high]
    if kind == "boolean":
        return [False, True]
    if kind == "array":
        items = candidates(schema.get("items") or {"type": "string"}, words, row, name)
        return [[item] for item in items[:WORDS]]
    if kind == "object" or "properties" in schema:
        return list(itertools.islice(combinations(schema, words, row), CALLS))
    return []


def combinations(schema: dict[str, Any], words: Sequence[str], row: dict[str, Any] | None = None
                 ) -> Iterator[dict[str, Any]]:
    """Argument dicts of an object schema's required properties, each value from `candidates`: every combination,
    lazily."""
    properties = schema.get("properties") or {}
    names = [n for n in properties if n in (schema.get("required") or [])]
    choices = [candidates(properties[n], words, row, n) for n in names]
    if any(not c for c in choices):
        return
    for values in itertools.product(*choices):
        yield dict(zip(names, values, strict=True))


def arguments_schema(offered: dict[str, Any], wire: dict[str, Any] | None) -> dict[str, Any]:
    """The schema of a tool's arguments by the names the model gives them (`offered`: get_json_schema's), each
    argument's own from the server's tool spec (`wire`) where it names it: get_json_schema flattens a nested
    argument into text, the server's spec has its fields (`$ref`s resolved, a few levels deep)."""
    parameters = offered["function"].get("parameters") or {}
    spec = (wire or {}).get("input_schema") or {}
    defs = spec.get("$defs") or spec.get("definitions") or {}
    served = {_key(n): v for n, v in (spec.get("properties") or {}).items()}
    properties = {n: _resolved(served[_key(n)], defs, 4) if _key(n) in served else v
                  for n, v in (parameters.get("properties") or {}).items()}
    return {"type": "object", "properties": properties, "required": parameters.get("required") or []}


def _key(name: str) -> str:
    """A name as the generator's and the server's spellings of it agree (case and punctuation aside)."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def _resolved(node: Any, defs: dict[str, Any], depth: int) -> Any:
    """`node` with each `$ref` to `#/$defs/X` (or definitions) replaced by X, `depth` levels of them at most."""
    if isinstance(node, list):
        return [_resolved(item, defs, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.rsplit("/", 1)[-1] in defs:
        return _resolved(defs[ref.rsplit("/", 1)[-1]], defs, depth - 1) if depth > 0 else {}
    return {k: _resolved(v, defs, depth) for k, v in node.items()}


def play(member: Any, row: dict[str, Any], say: Callable[[str], None]) -> Played | None:
    """The task's best call: each tool, each candidate call, one episode each (a reset, the call, the reward), until
    one earns at least 1.0; None when the environment took none of them."""
    from orsgen.evaluate.target import tool_methods
    from orsgen.runtime import ToolError

    cls = member.adapter_class(row)
    tools = member.schemas(cls)
    served = {_key(t.get("name", "")): t for t in member.module.SNAPSHOT.get("tools") or [] if isinstance(t, dict)}
    env = cls()
    best: Played | None = None
    tried, said = 0, time.monotonic()
    task = int(row["task_index"])
    for method, offered in zip(tool_methods(env), tools, strict=True):
        schema = arguments_schema(offered, served.get(_key(method.__name__)))
        prompt = env.reset(**row)
        words = words_of(prompt, row)
        for arguments in itertools.islice(combinations(schema, words, row), max(CALLS - tried, 0)):
            if tried:
                prompt = env.reset(**row)  # a fresh episode for each call
            tried += 1
            try:
                result = str(getattr(env, method.__name__)(**arguments))
            except ToolError:
                continue
            reward = env.get_reward()
            if best is None or (reward is not None and (best.reward is None or reward > best.reward)):
                best = Played(task, prompt, method.__name__, arguments, result, reward, tried, tools)
            if reward is not None and reward >= 1.0:
                best.tried = tried
                return best
            if time.monotonic() - said >= SAY_EVERY:
                say(f"  task {task}: {tried} calls tried, best reward {best.reward}")
                said = time.monotonic()
    if best is not None:
        best.tried = tried
    return best
