"""The committed example adapter is exactly what the generator produces from the example environment."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_echo_is_current(tmp_path):
    # Same relative output path and the pinned example port as `make generate`, so the header is the same too.
    result = subprocess.run(
        [sys.executable, "-m", "examples.regen", "8031", "http://127.0.0.1:8031", "-o", "generated/echo.py"],
        cwd=tmp_path, check=False, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    fresh = (tmp_path / "generated" / "echo.py").read_text()
    assert fresh == (ROOT / "generated" / "echo.py").read_text(), "run `make generate` and commit generated/echo.py"
