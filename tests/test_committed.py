"""The committed example adapter is exactly what this generator produces from its snapshot (`make check` also
compares it with the live example environment, on the port its header pins)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_echo_is_current():
    result = subprocess.run(
        [sys.executable, "-m", "orsgen", "--check", "generated/echo.py", "-o", "generated/echo.py"],
        cwd=ROOT, check=False, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr + "\nrun `make generate` and commit generated/echo.py"
    assert result.stdout == "generated/echo.py: up to date\n"
