"""The tests' shared harness: `servers` (ORS servers on 127.0.0.1 that log what they were asked), `generation` (the
CLI as a subprocess or in this process, and loading what it wrote), `trainers` (real GRPOTrainer set-ups with the
tiny offline model), `completions` (a scripted vLLM stand-in), and the worker scripts `distributed`, `owned_data`
and `training_install`. Nothing here imports pytest: the workers run in plain interpreters."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the clone: tests/harness/ is two folders down
