"""A long GRPO run on the echo environment recording its trajectories, for a test to interrupt:
`python -m tests.harness.trajectory_run MODULE_PATH OUT_DIR TRAJECTORIES_DIR` trains 200 steps of 4 rollouts with
`Trajectories(TRAJECTORIES_DIR)` and nothing else; the test sends SIGINT once records are on disk."""

import os
import sys
from pathlib import Path

from tests.harness import trainers
from tests.harness.generation import load

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(module_path: str, out_dir: str, directory: str) -> None:
    module = load(Path(module_path))
    trainer = trainers.trainer(module.Echo, out_dir, 200, tools=trainers.tool_methods(module.Echo()), threads=1,
                               train_dataset=module.dataset(), per_device_train_batch_size=4, num_generations=4,
                               callbacks=[module.Trajectories(directory)])
    trainer.train()


if __name__ == "__main__":
    main(*sys.argv[1:4])
