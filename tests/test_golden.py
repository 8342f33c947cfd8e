"""Golden cases: one folder each (tools.json, pyproject.toml with the options, expected.py), compared byte for byte
with `orsgen --check`, then type-checked and linted. Regenerate them all with `make golden`."""

import os
import sys
from pathlib import Path

import pytest
from transformers.utils import get_json_schema

from tests.harness import ROOT, processes
from tests.harness.generation import in_process, load
from tests.harness.trainers import tool_methods

CASES = sorted(p.parent for p in (Path(__file__).parent / "golden").glob("*/pyproject.toml"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_expected_output_is_current(case):
    result = in_process("--check", cwd=case)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    module = load(case / "expected.py")
    adapter_class = next(v for v in vars(module).values() if isinstance(v, type) and v.__bases__ == (module.runtime.Adapter,))
    tools = tool_methods(adapter_class())
    assert tools
    for tool in tools:
        get_json_schema(tool)


def test_expected_outputs_pass_ruff_and_mypy():
    paths = [str(c / "expected.py") for c in CASES]
    ruff = processes.run([sys.executable, "-m", "ruff", "check", "--no-cache", *paths], capture_output=True, text=True)
    assert ruff.returncode == 0, ruff.stdout
    # --strict, against the runtime's own types (mypy cannot see through the editable install's import hook:
    # MYPYPATH; the runtime is checked by `make lint`, its own rules, so errors there are silent here).
    mypy = processes.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
                           *paths], capture_output=True, text=True,
                         env={**os.environ, "MYPYPATH": str(ROOT / "codegen")})  # one run: no runtime copies
    assert mypy.returncode == 0 and f"in {len(paths)} source files" in mypy.stdout, mypy.stdout


def test_text_the_model_reads_is_clean():
    """No escaped-quote JSON in reviewed code, an object's fields spelled out once per tool, no look-alike characters."""
    text = (Path(__file__).parent / "golden" / "rich" / "expected.py").read_text()
    assert '{\\"properties\\"' not in text and '{"properties":{"name":' in text
    assert text.count('"description":"Human readable name"') == 1  # four arguments of `create` share the shape
    assert "extra_items: Extra Items (object: the same fields as item)" in text
    assert "\u02d0" not in (Path(__file__).parent / "golden" / "hostile" / "expected.py").read_text()
    assert "(choices : [1])" in (Path(__file__).parent / "golden" / "hostile" / "expected.py").read_text()
