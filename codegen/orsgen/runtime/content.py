"""Tool results and prompts as TRL takes them: text blocks joined into one string; with images, content parts."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any


def content(blocks: Sequence[Any]) -> Any:
    if all(block.type == "text" for block in blocks):
        return "\n".join(block.text for block in blocks)
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block.type == "text":
            parts.append({"type": "text", "text": block.text})
        elif block.type == "image":
            parts.append({"type": "image", "image": image(block.data, block.mimeType)})
    return parts


def image(data: str, mime: str) -> Any:
    """A PIL image when Pillow is installed (what processors take), else a data URI."""
    try:
        from PIL import Image
    except ImportError:
        return f"data:{mime};base64,{data}"
    return Image.open(io.BytesIO(base64.b64decode(data)))
