"""A tiny chat model that calls your environment's tools, built on the spot on a laptop's CPU (nothing from a model
hub): for trying GRPO, `transformers serve` and `orsgen eval` end to end before a real model.

    python -m orsgen.tiny generated/myenv.py -o tiny-model     # needs a training install: torch and transformers

It plays the first tasks of the module's split by hand against the served environment (for each task, calls made of
the prompt's words, the task's metadata and each enum's choices, one session each, keeping the one the environment
rewards most), then trains a two-layer Qwen3 (~100k parameters) on those episodes until it writes every token of
them, and saves its tokenizer and weights into the folder: `GRPOTrainer(model="tiny-model")` trains it and
`transformers serve tiny-model` serves it, its tool calls parsed.

`model` is the model, its chat format and warm-up (the examples, the tests and the benchmark build theirs with it),
`play` the tasks played by hand, `command` the command.
"""

from orsgen.tiny.command import MARKER, build, main
from orsgen.tiny.model import (
    CHAT_TEMPLATE,
    LEARNING_RATE,
    MARKERS,
    RESPONSE_TEMPLATE,
    SPECIAL,
    Lesson,
    call_text,
    conversation,
    first_turn,
    model,
    tokenizer,
    tokenizer_of,
    warm_up,
)

__all__ = ["CHAT_TEMPLATE", "LEARNING_RATE", "MARKER", "MARKERS", "RESPONSE_TEMPLATE", "SPECIAL", "Lesson", "build",
           "call_text", "conversation", "first_turn", "main", "model", "tokenizer", "tokenizer_of", "warm_up"]
