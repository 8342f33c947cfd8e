"""A tiny chat model built on the spot, for training offline on CPU: nothing is loaded from a model hub.

The tokenizer is a byte-level BPE trained on the conversations it will see; the chat template and the response
template (how TRL pulls tool calls out of generated text) are this file's own format:

    <|sys|>tools as JSON lines<|eot|>  <|user|>...<|eot|>  <|bot|>text<tool>{"name", "arguments"}</tool><|eot|>
    <|tool|>result<|eot|>
"""

import inspect
import json
import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

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


def tool_methods(instance: Any) -> list[Any]:
    """The tools TRL will find on an environment instance (public functions other than reset/get_reward)."""
    members = inspect.getmembers(type(instance), predicate=inspect.isfunction)
    return [getattr(instance, n) for n, _ in members if not n.startswith("_") and n not in ("reset", "get_reward")]


def recording(adapter_class: type) -> type:
    """A subclass whose tool calls (name, arguments, result or "error: ...") are logged in `calls` through the
    runtime's tool_call hook; its tools and its name are exactly the adapter's (TRL names the reward column after
    the class)."""
    from orsgen.runtime import hooks

    class Recording(adapter_class):  # type: ignore[misc, valid-type]
        calls: ClassVar[list[tuple[str, dict[str, Any], Any]]] = []

    def record(call: hooks.ToolCall) -> None:
        Recording.calls.append((call.name, call.arguments, call.result if call.error is None else f"error: {call.error}"))

    hooks.add("tool_call", record, Recording)
    Recording.__name__ = Recording.__qualname__ = adapter_class.__name__
    return Recording


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """An assistant turn that calls one tool, as the model would write it."""
    return "<tool>" + json.dumps({"name": name, "arguments": arguments}) + "</tool><|eot|>"


def conversation(prompt: str, name: str, arguments: dict[str, Any], result: str) -> list[dict[str, Any]]:
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": name, "content": result},
        {"role": "assistant", "content": result},
    ]


def tokenizer(conversations: Sequence[list[dict[str, Any]]], tools: Sequence[Callable[..., Any]]) -> Any:
    """A byte-level BPE tokenizer trained on `conversations` rendered with `tools`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    scratch = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0}, unk_token="x")))
    scratch.chat_template = CHAT_TEMPLATE
    corpus = [str(scratch.apply_chat_template(c, tools=list(tools), tokenize=False)) for c in conversations]
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


def warm_up(
    lm: Any,
    tok: Any,
    conversations: Sequence[list[dict[str, Any]]],
    tools: Sequence[Callable[..., Any]],
    steps: int,
    seed: int = 0,
) -> float:
    """Supervised next-token training on the assistant turns, so the model knows the tool-call format."""
    import torch

    rows = []
    for conv in conversations:
        enc = tok.apply_chat_template(
            conv, tools=list(tools), tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids = torch.tensor(enc["input_ids"])
        labels = ids.clone()
        labels[torch.tensor(enc["assistant_masks"]) == 0] = -100
        rows.append((ids, labels))
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=3e-3)
    lm.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        batch = [rows[rng.randrange(len(rows))] for _ in range(16)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (a, b) in enumerate(batch):
            ids[i, : len(a)], labels[i, : len(b)], mask[i, : len(a)] = a, b, 1
        loss = lm(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return float(loss.item())


def scripted_rollouts(first_turn: Callable[[int, str], str]) -> Callable[..., dict[str, Any]]:
    """A `rollout_func` whose first assistant turn is `first_turn(i, prompt_text)`; TRL runs the tools after it."""

    def rollout(prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        tok = trainer.processing_class
        prompt_ids, completion_ids = [], []
        for i, prompt in enumerate(prompts):
            ids = tok.apply_chat_template(
                prompt, tools=trainer.tools, add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
            prompt_ids.append(ids)
            text = first_turn(i, prompt[-1]["content"])
            completion_ids.append(tok(text, add_special_tokens=False)["input_ids"])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout


def grpo_config(output_dir: str, steps: int, **overrides: Any) -> Any:
    """GRPOConfig for a CPU run of a few steps: 2 prompts x 4 generations per step."""
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": output_dir,
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 64,
        "max_tool_calling_iterations": 2,
        "max_steps": steps,
        "learning_rate": 1e-3,
        "beta": 0.0,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "shuffle_dataset": False,
        "seed": 0,
    }
    settings.update(overrides)
    return GRPOConfig(**settings)
