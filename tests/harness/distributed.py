"""One GRPO worker of a multi-process run: `accelerate launch --cpu --num_processes 2 -m tests.harness.distributed
MODULE_PATH OUT_DIR`. Each process imports the generated module and builds its own adapter pool; it prints how many
tool calls its adapters made and how many sessions it left open."""

import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(module_path: str, out_dir: str) -> None:
    import torch
    from trl import GRPOTrainer

    from examples import tiny
    from examples.demo import load_module, recording, tool_methods

    torch.set_num_threads(1)
    module = load_module(Path(module_path))
    env_class = recording(module.Echo)
    tok = tiny.tokenizer([tiny.conversation("Echo the word apple", "echo", {"text": "apple"}, "apple")],
                         tool_methods(module.Echo()))

    def first_turn(i: int, prompt: str) -> str:
        word = re.search(r"Echo the word (\w+)", prompt)
        return tiny.call_text("echo", {"text": word.group(1) if word else "x"})

    trainer = GRPOTrainer(
        model=tiny.model(tok),
        processing_class=tok,
        args=tiny.grpo_config(out_dir, 2, max_tool_calling_iterations=1, per_device_train_batch_size=4,
                              num_generations=4),
        train_dataset=module.dataset(),
        environment_factory=env_class,
        rollout_func=tiny.scripted_rollouts(first_turn),
    )
    trainer.train()
    module.close_all()
    rank = int(os.environ.get("RANK", "0"))
    from orsgen.runtime import adapter

    live = [a for a in list(adapter._live) if a._session is not None or a._opening is not None]
    print(json.dumps({"rank": rank, "tool_calls": len(env_class.calls), "open_sessions": len(live),
                      "steps": trainer.state.global_step}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
