"""The tool lists the generator's tests read: copies of real servers' lists (tests/corpora/, see each SOURCE.txt),
the golden cases' inputs (tests/golden/*/tools.json), and the benchmark's 100-tool environment."""

import sys
from typing import Any

from tests.harness import ROOT

CORPORA = sorted((ROOT / "tests" / "corpora").glob("*/*.json"))
GOLDEN = sorted((ROOT / "tests" / "golden").glob("*/tools.json"))


def wide_tools() -> dict[str, Any]:
    """The /tools JSON of bench/env.py's 100-tool environment, as its server returns it."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from env import Wide  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return Wide.list_tools().model_dump()
