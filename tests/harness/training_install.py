"""A training install, checked from inside it: `python -m tests.harness.training_install BLACK_VERSION`.

Run by `.ci/trl-oldest` in a fresh venv that held its own black before `pip install orsgen trl ...` (the README's
training install): that black is untouched, orsgen requires no generator package, and the committed
`generated/echo.py` trains one GRPO step against the example environment, served on 127.0.0.1, with the runtime
alone. Prints one line and exits 0, or raises.
"""

from __future__ import annotations

import os
import re
import sys
from importlib.metadata import requires, version

from tests.harness import ROOT

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
GENERATOR = {"black", "jinja2", "datamodel-code-generator", "uvicorn"}


def main(black_before: str) -> None:
    assert version("black") == black_before, f"installing orsgen changed black: {version('black')}"
    needed = {re.split(r"[ <>=!~;\[]", r, maxsplit=1)[0].lower() for r in requires("orsgen") or [] if "extra ==" not in r}
    assert not needed & GENERATOR, f"the runtime requires generator packages: {sorted(needed & GENERATOR)}"
    from examples import serve
    from tests.harness import trainers
    from tests.harness.generation import load

    with serve.running("examples.echo:Echo") as server:
        os.environ["OPENREWARD_SESSION_URL"] = server.url  # the committed module pins the example's port
        module = load(ROOT / "generated" / "echo.py")
        trainer = trainers.trainer(module.Echo, str(ROOT / ".venv-trl-oldest" / "out"), 1, threads=1,
                                   tools=trainers.tool_methods(module.Echo()),
                                   train_dataset=module.dataset(num_tasks=4))
        trainer.train()
        module.close_all()
        rewards = [e["rewards/Echo/mean"] for e in trainer.state.log_history if "rewards/Echo/mean" in e]
        assert trainer.state.global_step == 1 and rewards == [1.0], trainer.state.log_history
    print(f"training install: black {version('black')} unchanged, no generator requirement, "
          f"TRL {version('trl')} trained 1 step with generated/echo.py (reward {rewards[0]})")


if __name__ == "__main__":
    main(sys.argv[1])
