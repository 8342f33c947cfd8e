"""A generated bundle passes the linters its modules pass (issue 26): ruff, with the project's rules and the wider
families users' configurations turn on (BLE001 caught the bundle's `except Exception`), and mypy --strict."""

import os
import sys

from tests.harness import ROOT, processes
from tests.harness.generation import in_process

# Rule families beyond ruff's defaults that generated code is held to: what a strict project commonly selects.
# The modules already pass them; the bundle has to as well.
WIDER = "W,B,BLE,UP,SIM,I,N,RUF,C4,PIE,RET,PL,S,T20,ISC,G,PT,Q,TID,ARG,ERA"


def test_a_generated_bundle_passes_ruff_and_mypy_strict(multi_server, tmp_path):
    folder = tmp_path / "mix"
    run = in_process(multi_server.url, "--env", "echo", "--env", "quiz", "-o", str(folder), cwd=ROOT)
    assert run.returncode == 0, run.stderr
    files = sorted(str(p) for p in folder.glob("*.py") if p.name != "__init__.py")
    assert [os.path.basename(f) for f in files] == ["bundle.py", "echo.py", "quiz.py"]
    ruff = processes.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--extend-select", WIDER, *files],
                         capture_output=True, text=True, cwd=ROOT)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    # As test_golden checks modules: --strict against the runtime's own types, the project's ignore_missing_imports
    # (datasets has no py.typed); the folder is a package, so the bundle's relative imports resolve to its members.
    mypy = processes.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
                           "--ignore-missing-imports", "-p", "mix"], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "MYPYPATH": str(ROOT / "codegen")})
    assert mypy.returncode == 0 and "in 4 source files" in mypy.stdout, mypy.stdout + mypy.stderr
