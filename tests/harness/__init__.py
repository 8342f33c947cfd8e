"""The tests' shared harness: `servers` (ORS servers on 127.0.0.1 that log what they were asked), `generation` (the
CLI as a subprocess or in this process, and loading what it wrote), `trainers` (real GRPOTrainer set-ups with the
tiny offline model), `completions` (a scripted vLLM stand-in), and the worker scripts `distributed`, `owned_data`
and `training_install`. Nothing here imports pytest: the workers run in plain interpreters."""

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the clone: tests/harness/ is two folders down


def emit(record: dict[str, Any]) -> None:
    """A worker's report: one JSON line in one write, so the lines of ranks sharing a pipe never interleave."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def records(output: str, *keys: str) -> list[dict[str, Any]]:
    """The workers' reports in `output` whose first key is one of `keys`, in order, wherever another process's
    output left them on a line."""
    decoder, found, at = json.JSONDecoder(), [], 0
    starts = re.compile("|".join(re.escape(json.dumps({k: 0})[:-3]) for k in keys))
    while (hit := starts.search(output, at)) is not None:
        record, at = decoder.raw_decode(output, hit.start())
        found.append(record)
    return found
