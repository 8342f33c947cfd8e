"""One GRPO worker of a multi-process run: `accelerate launch --cpu --num_processes 2 -m tests.harness.distributed
MODULE_PATH OUT_DIR`. Each process imports the generated module and builds its own adapter pool; it prints how many
tool calls its adapters made and how many sessions it left open."""

import os
import sys
from pathlib import Path

from tests.harness import emit, trainers
from tests.harness.generation import load

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(module_path: str, out_dir: str) -> None:
    module = load(Path(module_path))
    env_class = trainers.recording(module.Echo)
    trainer = trainers.trainer(env_class, out_dir, 2, tools=trainers.tool_methods(module.Echo()), threads=1,
                               train_dataset=module.dataset(), per_device_train_batch_size=4, num_generations=4)
    trainer.train()
    module.close_all()
    rank = int(os.environ.get("RANK", "0"))
    from orsgen.runtime import open_sessions

    emit({"rank": rank, "tool_calls": len(env_class.calls), "open_sessions": open_sessions(),
                      "steps": trainer.state.global_step})


if __name__ == "__main__":
    main(*sys.argv[1:3])
