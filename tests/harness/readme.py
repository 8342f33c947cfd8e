"""The README's own code blocks, for the tests that run what it shows: the block of a language holding a text, and
the commands of a console block (`$ ` lines, a trailing `# comment` dropped)."""

import re

from tests.harness import ROOT


def text() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def block(language: str, holding: str) -> str:
    """The one ```language block of the README that holds `holding`, without its fences."""
    found = [b for b in re.findall(rf"^```{language}\n(.*?)^```", text(), re.DOTALL | re.MULTILINE) if holding in b]
    assert len(found) == 1, f"{len(found)} ```{language} blocks of README.md hold {holding!r}"
    return found[0]


def commands(holding: str) -> list[str]:
    """The commands of the README's console block that holds `holding`, each as typed, its comment dropped."""
    lines = [line[2:] for line in block("console", holding).splitlines() if line.startswith("$ ")]
    return [re.sub(r"\s+#\s.*$", "", line).strip() for line in lines]
