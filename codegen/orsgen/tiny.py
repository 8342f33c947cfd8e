"""A tiny chat model that calls your environment's tools, built on the spot on a laptop's CPU (nothing from a model
hub): for trying GRPO, `transformers serve` and `orsgen eval` end to end before a real model.

    python -m orsgen.tiny generated/myenv.py -o tiny-model     # needs a training install: torch and transformers

It plays the first tasks of the module's split by hand against the served environment (for each task, calls made of
the prompt's words, the task's metadata and each enum's choices, one session each, keeping the one the environment
rewards most), then trains a two-layer Qwen3 (~100k parameters) on those episodes until it writes every token of
them, and saves its tokenizer and weights into the folder: `GRPOTrainer(model="tiny-model")` trains it and
`transformers serve tiny-model` serves it, its tool calls parsed.

The chat format is this file's own (`CHAT_TEMPLATE`, `RESPONSE_TEMPLATE`: how transformers pulls tool calls out of
generated text):

    <|sys|>tools as JSON lines<|eot|>  <|user|>...<|eot|>  <|bot|>text<tool>{"name", "arguments"}</tool><|eot|>
    <|tool|>result<|eot|>
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from orsgen.errors import OrsgenError

SPECIAL = ["<|pad|>", "<|sys|>", "<|user|>", "<|bot|>", "<|tool|>", "<|eot|>"]
MARKERS = ["<tool>", "</tool>"]

# A newline right after a {% tag %} is eaten (trim_blocks), so newlines are written as {{ nl }}.
CHAT_TEMPLATE = (
    "{% set nl = '\\n' %}"
    "{% if tools %}<|sys|>{% for t in tools %}{% set f = t.function if t.function is defined else t %}"
    "{{ {'name': f.name, 'description': f.description, 'parameters': f.parameters} | tojson }}{{ nl }}"
    "{% endfor %}<|eot|>{{ nl }}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|bot|>{% generation %}{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}{% set f = c.function if c.function is defined else c %}"
    '<tool>{"name": {{ f.name | tojson }}, "arguments": '
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}}</tool>"
    "{% endfor %}<|eot|>{% endgeneration %}{{ nl }}"
    "{% elif m.role == 'tool' %}<|tool|>{{ m.content }}<|eot|>{{ nl }}"
    "{% elif m.role == 'system' %}<|sys|>{{ m.content }}<|eot|>{{ nl }}"
    "{% else %}<|user|>{{ m.content }}<|eot|>{{ nl }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|bot|>{% endif %}"
)

RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|bot|>",
    "fields": {
        "tool_calls": {
            "open": "<tool>",
            "close_pattern": r"</tool>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|eot\|>\s*", "content": "text"},
    },
}

MARKER = "orsgen-tiny.json"  # written last into a built folder: how it was built and how the warm-up went
LEARNING_RATE = 1e-2
STREAK = 5  # steps in a row with every assistant token right before the warm-up stops
STEPS = 600  # the warm-up's most steps
TASKS = 8  # tasks played by hand (each one episode the model learns)
CALLS = 200  # calls tried at most per task
WORDS = 12  # candidate strings per argument at most
SAY_EVERY = 3.0  # seconds between progress lines
REPLY_CHARS = 60  # the final assistant turn: the tool's result, cut to this


# -- the chat format -------------------------------------------------------------------------------------------------


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """An assistant turn that calls one tool, as the model writes it."""
    return "<tool>" + json.dumps({"name": name, "arguments": arguments}) + "</tool><|eot|>"


def conversation(prompt: str, name: str, arguments: dict[str, Any], result: str) -> list[dict[str, Any]]:
    """A finished episode: the prompt, one tool call, its result, and the result said back."""
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": name, "content": result},
        {"role": "assistant", "content": result},
    ]


Lesson = tuple[list[dict[str, Any]], Sequence[Any]]  # a conversation and the tools it is rendered with


def tokenizer(conversations: Sequence[list[dict[str, Any]]], tools: Sequence[Any]) -> Any:
    """A byte-level BPE tokenizer trained on `conversations` rendered with `tools` (tool methods, or their JSON
    schemas: the chat template renders both alike)."""
    return tokenizer_of([(c, tools) for c in conversations])


def tokenizer_of(lessons: Sequence[Lesson]) -> Any:
    """`tokenizer`, each conversation rendered with tools of its own."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    scratch = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0}, unk_token="x")))
    scratch.chat_template = CHAT_TEMPLATE
    corpus = [str(scratch.apply_chat_template(c, tools=list(tools), tokenize=False)) for c, tools in lessons]
    for token in SPECIAL + MARKERS:
        corpus = [text.replace(token, "\n") for text in corpus]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus * 4,
        trainers.BpeTrainer(
            vocab_size=600,
            min_frequency=2,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    bpe.add_tokens([AddedToken(m, normalized=False, special=False) for m in MARKERS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|eot|>", pad_token="<|pad|>", clean_up_tokenization_spaces=False
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.response_template = RESPONSE_TEMPLATE
    return tok


def model(tok: Any, seed: int = 0) -> Any:
    """A two-layer Qwen3 with ~100k parameters."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    lm = Qwen3ForCausalLM(config)
    lm.generation_config.eos_token_id = tok.eos_token_id
    lm.generation_config.pad_token_id = tok.pad_token_id
    return lm


def warm_up(lm: Any, tok: Any, lessons: Sequence[Lesson], steps: int = STEPS,
            say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Supervised steps on the assistant turns of every lesson at once, until every assistant token is the model's
    top guess for STREAK steps in a row (a greedy decode then replays the episodes exactly), or `steps`. Says how it
    goes every SAY_EVERY seconds through `say`."""
    import torch

    rows = []
    for conv, tools in lessons:
        enc = tok.apply_chat_template(
            conv, tools=list(tools), tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids = torch.tensor(enc["input_ids"])
        labels = ids.clone()
        labels[torch.tensor(enc["assistant_masks"]) == 0] = -100
        rows.append((ids, labels))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (a, b) in enumerate(rows):
        ids[i, : len(a)], labels[i, : len(b)], mask[i, : len(a)] = a, b, 1
    targets = labels[:, 1:]
    scored = targets != -100

    optimizer = torch.optim.AdamW(lm.parameters(), lr=LEARNING_RATE)
    lm.train()
    streak, step, said = 0, 0, time.monotonic()
    while True:
        out = lm(input_ids=ids, attention_mask=mask, labels=labels)
        loss = float(out.loss.item())
        hits = out.logits[:, :-1].argmax(-1)[scored] == targets[scored]
        share = float(hits.float().mean())
        streak = streak + 1 if bool(hits.all()) else 0
        if streak >= STREAK or step >= steps:
            break
        if say is not None and time.monotonic() - said >= SAY_EVERY:
            say(f"  warm-up step {step} (at most {steps}): loss {loss:.3f}, {share:.0%} of the answer tokens right")
            said = time.monotonic()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
    lm.eval()
    return {"warm_up_steps": step, "loss": round(loss, 5), "tokens_right": round(share, 4),
            "all_tokens_right": streak >= STREAK}


def first_turn(lm: Any, tok: Any, tools: Sequence[Any], prompt: str) -> str:
    """The model's greedy answer to `prompt`, as text with its special tokens."""
    import torch

    enc = tok.apply_chat_template([{"role": "user", "content": prompt}], tools=list(tools),
                                  add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.no_grad():
        out = lm.generate(**enc, max_new_tokens=96, do_sample=False)
    return str(tok.decode(out[0, enc["input_ids"].shape[-1]:]))


# -- playing the tasks by hand ---------------------------------------------------------------------------------------


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


# -- the command -----------------------------------------------------------------------------------------------------


def build(target: str, out: Path, num_tasks: int = TASKS, steps: int = STEPS, seed: int = 0,
          say: Callable[[str], None] = print) -> dict[str, Any]:
    """Play the first `num_tasks` tasks of each environment `target` (a generated module or bundle) names, teach the
    tiny model their best calls, save it into `out`; what was done (also in `out`/orsgen-tiny.json)."""
    from orsgen.evaluate import target as targets

    started = time.monotonic()
    members = targets.members(target)
    _need_torch()
    from orsgen import runtime

    played: list[Played] = []
    try:
        for member in members:
            rows = _rows(member, num_tasks)
            where = member.module.PINNED.sessions.server(None) or member.module.PINNED.target
            say(f"orsgen tiny: playing {len(rows)} tasks of {member.name} ({member.split}) at {where} by hand: the "
                "call each rewards most")
            for row in rows:
                found = play(member, row, say)
                if found is None:
                    say(f"  task {row['task_index']}: no call the environment took (kept out)")
                    continue
                say(found.line())
                played.append(found)
    finally:
        runtime.close_all()
    if not played:
        raise OrsgenError(f"{target}: no task took any call made of its prompt's words, its metadata and the enums' "
                          "choices: the tiny model has nothing to learn from")
    rewarded = sum(1 for p in played if p.reward is not None and p.reward >= 1.0)

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is tiny: on 2 busy cores one thread is several times faster than two
    try:
        tok = tokenizer_of([p.lesson() for p in played])
        lm = model(tok, seed=seed)
        size = sum(p.numel() for p in lm.parameters())
        say(f"orsgen tiny: {rewarded} of {len(played)} tasks earned a reward of 1.0 or more; teaching a two-layer "
            f"Qwen3 ({size:,} parameters) those calls on the CPU, at most {steps} steps")
        warm = warm_up(lm, tok, [p.lesson() for p in played], steps, say)
        replayed = sum(first_turn(lm, tok, p.tools, p.prompt) == call_text(p.name, p.arguments) for p in played)
    finally:
        torch.set_num_threads(threads)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Writing model shards" for a file of 400 kB
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    tok.save_pretrained(out)
    lm.save_pretrained(out)
    info = {"target": target, "tasks": len(played), "rewarded": rewarded, "replayed": replayed, "parameters": size,
            **warm, "seconds": round(time.monotonic() - started, 1)}
    (out / MARKER).write_text(json.dumps(info, indent=1) + "\n")
    say(f"orsgen tiny: saved {out} in {info['seconds']:.0f} s: {warm['warm_up_steps']} warm-up steps, "
        f"{replayed} of {len(played)} calls written back exactly by a greedy first turn")
    return info


def _rows(member: Any, num_tasks: int) -> list[dict[str, Any]]:
    from orsgen.runtime import client

    try:
        return list(member.module.dataset(num_tasks=None).to_list()[:num_tasks])
    except Exception as exc:  # noqa: BLE001 - an environment that cannot list its tasks: one line
        where = member.module.PINNED.sessions.server(None) or member.module.PINNED.target
        raise OrsgenError(f"the environment {member.name} at {where} cannot list its tasks: "
                          f"{client.describe(exc)[:300]}: is it running (orsgen serve)?") from None


def _need_torch() -> None:
    import importlib.util

    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise OrsgenError(f"orsgen.tiny trains a model: it needs {' and '.join(missing)} (a training install: torch "
                          "first, the build your machine needs, then orsgen's train extra)")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (python -m orsgen.tiny --help lists the options)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m orsgen.tiny", allow_abbrev=False, description=__doc__.split("\n\n")[0],
                epilog="then: transformers serve DIR --port 8020 --device cpu, and orsgen eval MODULE --base-url "
                "http://127.0.0.1:8020/v1 --model DIR")
    p.add_argument("target", metavar="MODULE", help="a generated module or bundle (.py), its environment served")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="the folder to save the model in")
    p.add_argument("-n", "--num-tasks", type=int, default=TASKS, metavar="N",
                   help=f"tasks played by hand, the first of the split (default {TASKS})")
    p.add_argument("--steps", type=int, default=STEPS, metavar="N", help=f"most warm-up steps (default {STEPS})")
    p.add_argument("--seed", type=int, default=0, help="the model's initial weights")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(key, "1")  # nothing is downloaded
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.num_tasks < 1 or args.steps < 0:
        print("orsgen: error: -n takes 1 or more tasks, --steps 0 or more", file=sys.stderr)
        return 2
    try:
        build(args.target, args.output, args.num_tasks, args.steps, args.seed,
              say=lambda line: print(line, flush=True))
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("orsgen tiny: interrupted (nothing saved)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
