"""Tool budgets: how much of a tool's result the model reads, how long one call may wait, how many calls and seconds
an episode may have. A module pins them (`Pinned.budgets`: environment-wide keys, and per tool under "tools", keyed
by the tool's wire name); run-time settings (settings.py) override them key by key. For one tool and key the value
is, first to last: the setting `tool_budgets[tool][key]`, the module's `budgets["tools"][tool][key]`, the
environment-wide setting, the module's environment-wide value; else there is none. A tool's `timeout` replaces
`tool_timeout`; the module's `episode-timeout` is the default of `episode_timeout`.

A result over a cap is cut where `truncate` says ("head" keeps its start, "tail" its end, "middle" both), and one line
saying what was cut stands where the cut is. Caps count characters, or tokens of `tokenizer` (cut at token boundaries,
the text kept as it came); with both, the cut that keeps less is made. The text parts of a result with images count
as one text, in order: a part the cut takes whole is left out, images stay where they were; images past `max-images`
become one line at the first one left out. A result within its caps is returned as it came (the same object), and a
module without budgets pays one flag test per result.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orsgen.runtime import settings
from orsgen.runtime.process import STATE
from orsgen.runtime.settings import BUDGET_BY_KEY, BUDGET_KEYS, TOOL_KEYS, Refused, Settings

# The environment-wide budget keys and the setting that overrides each at run time (the table's).
SETTING = {row.key: row.setting for row in BUDGET_KEYS if row.setting is not None}
CAPS = ("max-output-chars", "max-output-tokens", "max-images")
PINNED = "pinned in the module"
_FROM = {"head": "the end", "tail": "the start", "middle": "the middle"}  # where a cut that keeps this side is


@dataclass(frozen=True)
class Limits:
    """One tool's budget, as it applies to its calls."""

    chars: int | None = None
    tokens: int | None = None
    tokenizer: str | None = None
    truncate: str = "middle"
    images: int | None = None
    timeout: float | None = None  # its own bound on a call; None: the tool_timeout setting's


@dataclass(frozen=True)
class Cut:
    """What a budget took out of one result: `count` characters or tokens (`unit`) of its text, `images` images."""

    count: int = 0
    unit: str | None = None  # "characters" or "tokens"
    images: int = 0


NOTHING = Cut()


class Budgets:
    """The budgets of one episode: a module's pinned `budgets` under the run-time settings `config`. Built at reset,
    where a bad value is refused in one line (ValueError) before any request."""

    def __init__(self, pinned: Mapping[str, Any] | None = None, config: Settings = settings.DEFAULTS, *,
                 module: str = "the module", snapshot: Mapping[str, Any] | None = None) -> None:
        self.config = config
        mine, per_tool = _checked(pinned or {}, module, snapshot)
        given = dict(config.tool_budgets or {})
        known = _tools(snapshot) if given else set()
        unknown = sorted(set(given) - known) if known else []
        if unknown:  # a misspelt name would be a budget silently not applied
            raise ValueError(f"tool_budgets: {module} has no tool {unknown[0]!r}: its tools are "
                             f"{', '.join(sorted(known))}")
        # first to last, ahead of the environment-wide values
        self._per_tool: list[Mapping[str, Mapping[str, Any]]] = [given, per_tool]
        self._wide = {key: getattr(config, name) if getattr(config, name) is not None else mine.get(key)
                     for key, name in SETTING.items()}
        self.caps = any(self._wide[key] is not None for key in CAPS) or any(
            keys.get(key) is not None for source in self._per_tool for keys in source.values() for key in CAPS)
        self._limits: dict[str, Limits] = {}
        self.max_tool_calls, self.calls_from = self.limit("max-tool-calls")
        self.episode_timeout, self.timeout_from = self.limit("episode-timeout")
        tokens = self._wide["max-output-tokens"] is not None or any(
            keys.get("max-output-tokens") is not None for source in self._per_tool for keys in source.values())
        if tokens:  # loaded here, once per process: a tokenizer that cannot load stops the first reset, not a call
            name = self._wide["tokenizer"]
            if name is None:
                raise ValueError(f"{module}: max-output-tokens needs a tokenizer to count with: set tokenizer (the "
                                 "module's [tool.orsgen] target, or the tokenizer setting)")
            try:
                tokenizer(name)
            except Exception as exc:  # noqa: BLE001 - whatever stops it loading, in one line
                raise ValueError(f"{module}: the tokenizer {name!r} (max-output-tokens) could not be loaded: "
                                 f"{_line(exc)}") from None

    def limit(self, key: str) -> tuple[Any, str]:
        """An environment-wide budget's value (None: none) and where it came from, as a refusal names it: its
        setting, else the module's pin."""
        row = BUDGET_BY_KEY[key]
        if row.setting is not None and getattr(self.config, row.setting) is not None:
            return self._wide[key], row.said or f"the {row.setting} setting"
        return self._wide[key], f"{key}, {PINNED}"

    def limits(self, tool: str) -> Limits:
        """Tool `tool`'s budget (its wire name)."""
        found = self._limits.get(tool)
        if found is None:
            given, pinned = (source.get(tool, {}) for source in self._per_tool)

            def pick(key: str) -> Any:
                for source in (given, pinned, self._wide):
                    if source.get(key) is not None:
                        return source[key]
                return None

            found = self._limits[tool] = Limits(
                pick("max-output-chars"), pick("max-output-tokens"), self._wide["tokenizer"],
                pick("truncate") or "middle", pick("max-images"),
                given.get("timeout") if given.get("timeout") is not None else pinned.get("timeout"))
        return found

    def timeout(self, tool: str) -> tuple[float, bool]:
        """The bound on one call of `tool`, and whether it is the tool's own (else tool_timeout's)."""
        own = self.limits(tool).timeout if any(self._per_tool) else None
        return (own, True) if own is not None else (self.config.tool_timeout, False)

    def cap(self, tool: str, result: Any) -> tuple[Any, Cut]:
        """What the model reads of a call of `tool` that returned `result` (a str, or content parts), and the cut."""
        if not self.caps:
            return result, NOTHING
        limits = self.limits(tool)
        if isinstance(result, str):
            texts, cut = _cut([result], limits)
            return (result, NOTHING) if texts is None else (texts[0], cut)
        if isinstance(result, list):
            return _cut_parts(result, limits)
        return result, NOTHING


def no_answer(tool: str, limit: float) -> str:
    """What the model reads of a call abandoned at its tool's own timeout."""
    return (f"{tool}: no answer within {limit:g}s (its timeout): the call was abandoned; the session stays open and "
            "the tool may still be running there")


# -- the pinned budgets, checked --------------------------------------------------------------------------------------


def _tools(snapshot: Mapping[str, Any] | None) -> set[str]:
    """The wire names a module's snapshot holds: its tools, its task-specific tools, its terminal tool."""
    if snapshot is None:
        return set()
    found = list(snapshot.get("tools") or []) + list((snapshot.get("task_tools") or {}).get("tools") or [])
    found.append(snapshot.get("terminal_tool") or {})
    return {str(t["name"]) for t in found if isinstance(t, Mapping) and t.get("name")}


def _checked(pinned: Mapping[str, Any], module: str,
             snapshot: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A module's budgets as values (environment-wide, per tool); ValueError, one line, for one that is not."""
    def value(key: str, raw: Any, tool: str | None = None) -> Any:
        where = f"{module} pins {key} = {raw!r}" + ("" if tool is None else f" for tool {tool!r}")
        try:
            return settings.budget(key, raw)
        except (Refused, TypeError) as exc:
            raise ValueError(f"{where}: {exc}") from None

    mine: dict[str, Any] = {}
    for key, raw in pinned.items():
        if key == "tools":
            continue
        if key not in SETTING:
            raise ValueError(f"{module} pins a budget {key!r} this orsgen does not know: one of "
                             f"{', '.join([*SETTING, 'tools'])}")
        mine[key] = value(key, raw)
    per_tool: dict[str, dict[str, Any]] = {}
    tools = pinned.get("tools") or {}
    if not isinstance(tools, Mapping) or not all(isinstance(keys, Mapping) for keys in tools.values()):
        raise ValueError(f"{module} pins tools = {tools!r}: {{tool name: {{key: value}}}}")
    known = _tools(snapshot) if tools else set()
    for tool, keys in tools.items():
        if known and tool not in known:
            raise ValueError(f"{module} pins a budget for tool {tool!r}, which it does not have: its tools are "
                             f"{', '.join(sorted(known))}")
        for key in keys:
            if key not in TOOL_KEYS:
                raise ValueError(f"{module} pins {key} for tool {tool!r}: a tool's budget is one of "
                                 f"{', '.join(TOOL_KEYS)}")
        per_tool[str(tool)] = {key: value(key, raw, tool) for key, raw in keys.items()}
    return mine, per_tool


def _line(exc: BaseException) -> str:
    line = " ".join(f"{type(exc).__name__}: {exc}".split())
    return line if len(line) <= 300 else line[:297] + "..."


# -- tokenizers -------------------------------------------------------------------------------------------------------

class Tokenizers:
    """The tokenizers this process loaded, by name (held by process.STATE)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded: dict[str, Any] = {}


def tokenizer(name: str) -> Any:
    """The Rust tokenizer of `name` (a model hub name, or a local path: offline), loaded once per process with
    transformers' AutoTokenizer; a copy without truncation or padding, which threads may share."""
    tokenizers = STATE.part("tokenizers", Tokenizers)
    with tokenizers.lock:
        if name not in tokenizers.loaded:
            from tokenizers import Tokenizer
            from transformers import AutoTokenizer

            loaded = AutoTokenizer.from_pretrained(name)
            if not getattr(loaded, "is_fast", False):
                raise ValueError("it has no fast (Rust) version, which cutting at token boundaries needs")
            backend = Tokenizer.from_str(loaded.backend_tokenizer.to_str())
            backend.no_truncation()
            backend.no_padding()
            tokenizers.loaded[name] = backend
        return tokenizers.loaded[name]


def _token_spans(texts: list[str], name: str) -> list[tuple[int, int]]:
    """Every token of `texts` read as one text (each part tokenized alone), as (start, end) in that text."""
    backend, spans, at = tokenizer(name), [], 0
    for text in texts:
        if text:
            spans += [(at + start, at + end) for start, end in backend.encode(text, add_special_tokens=False).offsets]
        at += len(text)
    return spans


# -- the cut ----------------------------------------------------------------------------------------------------------


def _keep(limit: int, side: str) -> tuple[int, int]:
    """Units kept at the start and at the end."""
    return {"head": (limit, 0), "tail": (0, limit), "middle": (limit - limit // 2, limit // 2)}[side]


def _cut(texts: list[str], limits: Limits) -> tuple[list[str] | None, Cut]:
    """`texts` read as one text within the limits, each part cut where the cut falls, the line saying so in the part
    where it begins; None when it is within them."""
    total, side = sum(map(len, texts)), limits.truncate
    best: tuple[int, int, int, int, int, str, str, int] | None = None  # kept, head end, tail start, cut, of, ...
    if limits.chars is not None and total > limits.chars:
        head, tail = _keep(limits.chars, side)
        best = (limits.chars, head, total - tail, total - limits.chars, total, "characters", "max-output-chars",
                limits.chars)
    # A token holds at least one byte (a leading space token aside): fewer bytes than the cap need no tokenizing.
    if limits.tokens is not None and limits.tokenizer is not None and \
            sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) >= limits.tokens:
        spans = _token_spans(texts, limits.tokenizer)
        if len(spans) > limits.tokens:
            head, tail = _keep(limits.tokens, side)
            head_end = spans[head - 1][1] if head else 0
            tail_start = max(head_end, spans[len(spans) - tail][0] if tail else total)
            kept = head_end + total - tail_start
            if best is None or kept < best[0]:
                best = (kept, head_end, tail_start, len(spans) - limits.tokens, len(spans), "tokens",
                        "max-output-tokens", limits.tokens)
    if best is None:
        return None, NOTHING
    _, head_end, tail_start, count, of, unit, key, limit = best
    line = f"[orsgen: {count:,} of {of:,} {unit} cut from {_FROM[side]} of this result ({key} {limit:,}): ask for less]"
    marker = {"head": "\n" + line, "tail": line + "\n", "middle": "\n" + line + "\n"}[side]
    out, at, placed = [], 0, False
    for text in texts:
        end = at + len(text)
        kept_head = text[:max(0, min(end, head_end) - at)]
        kept_tail = text[max(0, tail_start - at):] if end > tail_start else ""
        if not placed and at <= head_end < end:  # the cut begins in this part
            out.append(kept_head + marker + kept_tail)
            placed = True
        else:
            out.append(kept_head + kept_tail)
        at = end
    if not placed:  # a cut of tokens without width, at the very end
        last = max((i for i, text in enumerate(texts) if text), default=len(texts) - 1)
        out[last] += marker
    return out, Cut(count, unit)


def _cut_parts(parts: list[Any], limits: Limits) -> tuple[Any, Cut]:
    """Content parts within the limits: their text parts as one text, then the images."""
    def kind(part: Any) -> str | None:
        return part.get("type") if isinstance(part, dict) else None

    texts = [i for i, part in enumerate(parts) if kind(part) == "text" and isinstance(part.get("text"), str)]
    out: list[Any] = list(parts)
    cut_texts, cut = _cut([parts[i]["text"] for i in texts], limits) if texts else (None, NOTHING)
    if cut_texts is not None:
        for i, text in zip(texts, cut_texts, strict=True):
            out[i] = {**parts[i], "text": text} if text or not parts[i]["text"] else None  # taken whole: left out
        out = [part for part in out if part is not None]
    images = [i for i, part in enumerate(out) if kind(part) == "image"]
    left = len(images) - limits.images if limits.images is not None else 0
    if left > 0:
        first = images[-left]
        line = f"[orsgen: {left:,} of {len(images):,} images left out of this result (max-images {limits.images:,})]"
        gone = set(images[-left:])
        out = [part for i, part in enumerate(out[:first]) if i not in gone] + [{"type": "text", "text": line}] + \
              [part for i, part in enumerate(out[first:], first) if i not in gone]
        cut = Cut(cut.count, cut.unit, left)
    if cut is NOTHING:
        return parts, NOTHING
    return out, cut
