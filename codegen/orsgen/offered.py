"""A tool as TRL offers it to the model: transformers' `get_json_schema` of its method (`orsgen eval`, `--report`),
made without importing torch."""

from __future__ import annotations

import sys
from typing import Any


def json_schema(method: Any) -> dict[str, Any]:
    """`get_json_schema(method)`. transformers imports torch at each typed parameter only to map `torch.Tensor`, which
    no generated tool takes (2 s of CPU, and most of `orsgen eval`'s memory): its `is_torch_available` says no for the
    call, unless torch is loaded already (then it maps as TRL's). Not for threads at once: it swaps a module global."""
    from transformers.utils import chat_template_utils, get_json_schema

    saved = getattr(chat_template_utils, "is_torch_available", None)
    if saved is not None and "torch" not in sys.modules:
        chat_template_utils.is_torch_available = lambda: False
    try:
        return get_json_schema(method)  # type: ignore[no-any-return]
    finally:
        if saved is not None:
            chat_template_utils.is_torch_available = saved
