"""One GRPO worker of a run across nodes, recording which task every reset opened (owned_data.tracking), with
`EpisodeMetrics` and `Trajectories`: `python -m torch.distributed.run --nnodes N --node_rank R --nproc_per_node P ...
-m tests.harness.multinode MODULE_PATH OUT_DIR STEPS PER_DEVICE NUM_GENERATIONS DATA` (DATA: "owned", the environment
owns the tasks, or "dataset", `train_dataset=dataset()`). Prints one `{"reset": {...}}` line per reset and a final
`{"rank": ...}` line with the global and local rank, its node, the orsgen/ figures it logged and what it left open.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.harness import emit, owned_data
from tests.harness.generation import load

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(module_path: str, out_dir: str, steps: str, per_device: str, num_generations: str, data: str) -> None:
    module = load(Path(module_path))
    env_class = owned_data.tracking(module.Echo, echo=True)
    run = owned_data.trainer(module, env_class, out_dir, int(steps), threads=1,
                             per_device_train_batch_size=int(per_device), num_generations=int(num_generations),
                             train_dataset=module.dataset() if data == "dataset" else None, logging_steps=1,
                             callbacks=[module.EpisodeMetrics(), module.Trajectories(str(Path(out_dir) / "traj"))])
    run.train()
    module.close_all()
    from orsgen.runtime import open_sessions

    figures = [{k.removeprefix("orsgen/"): v for k, v in entry.items() if k.startswith("orsgen/")}
               for entry in run.state.log_history if any(k.startswith("orsgen/") for k in entry)]
    emit({"rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"]),
          "node": int(os.environ["GROUP_RANK"]), "world": int(os.environ["WORLD_SIZE"]), "steps": run.state.global_step,
          "resets": len(env_class.resets), "open_sessions": open_sessions(), "figures": figures})


if __name__ == "__main__":
    main(*sys.argv[1:7])
