"""The committed example adapter is exactly what this generator produces from its snapshot (`make check` also
compares it with the live example environment, on the port its header pins)."""

from tests.harness import ROOT
from tests.harness.generation import orsgen


def test_generated_echo_is_current():
    result = orsgen("--check", "generated/echo.py", "-o", "generated/echo.py", cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr + "\nrun `make generate` and commit generated/echo.py"
    assert result.stdout == "generated/echo.py: up to date\n"
