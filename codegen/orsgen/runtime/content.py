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
            picture = image(block.data, block.mimeType)
            parts.append({"type": "image", "image": picture} if picture is not None else
                         {"type": "text", "text": f"[an image ({block.mimeType}) that could not be decoded]"})
    return parts


def image(data: str, mime: str) -> Any:
    """A PIL image when Pillow is installed (what processors take), else a data URI; None when Pillow cannot read
    it (an SVG, corrupt bytes): the tool did run and its reward counts, so its result is not turned into a failure."""
    try:
        from PIL import Image
    except ImportError:
        return f"data:{mime};base64,{data}"
    try:
        picture = Image.open(io.BytesIO(base64.b64decode(data)))
        picture.load()  # decoded here: a truncated image fails now, not later in the trainer's processor
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):  # what Pillow raises for bad images
        return None
    return picture
