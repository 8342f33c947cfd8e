"""The tiny chat model: its format (`CHAT_TEMPLATE`, and `RESPONSE_TEMPLATE`, how transformers pulls tool calls out
of generated text), its byte-level BPE tokenizer trained on the conversations it will see, a two-layer Qwen3 of about
100,000 parameters, and the warm-up that teaches it those conversations. The format:

    <|sys|>tools as JSON lines<|eot|>  <|user|>...<|eot|>  <|bot|>text<tool>{"name", "arguments"}</tool><|eot|>
    <|tool|>result<|eot|>
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

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

LEARNING_RATE = 1e-2
STREAK = 5  # steps in a row with every assistant token right before the warm-up stops
STEPS = 600  # the warm-up's most steps
SAY_EVERY = 3.0  # seconds between progress lines


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
