"""A picture of a run: each task's pass rate and the reward distribution (PNG), with matplotlib (`orsgen[plot]`);
without it the run has its text report only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orsgen.evaluate.report import reasons


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw(summary: dict[str, Any], rewards: list[float], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in summary["tasks"] if t["pass_rate"] is not None]
    if not tasks:  # nothing counted: said once, no empty axes or bar to misread
        figure = plt.figure(figsize=(11, 4))
        said = reasons(summary["unscored"]) or "none ran"
        figure.text(0.5, 0.5, f"no episode counted ({said})", ha="center", va="center")
    else:
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        labels = [str(t["task_index"]) if len({x["environment"] for x in tasks}) <= 1 else
                  f"{t['environment']}/{t['task_index']}" for t in tasks]
        left.bar(range(len(tasks)), [t["pass_rate"] for t in tasks], color="#4c72b0")
        left.set_xticks(range(len(tasks)), labels, rotation=90 if len(tasks) > 20 else 0, fontsize=7)
        left.set_ylim(0, 1)
        left.set_xlabel("task")
        left.set_ylabel("pass rate")
        left.set_title(f"pass rate per task ({summary['pass']['rule'].split(';')[0]})", fontsize=9)
        if rewards:
            right.hist(rewards, bins=min(20, max(5, len(set(rewards)))), color="#55a868")
            right.set_xlabel("reward")
            right.set_ylabel("episodes")
            right.set_title(f"reward distribution ({len(rewards)} scored episodes)", fontsize=9)
        else:
            right.set_axis_off()
            right.text(0.5, 0.5, f"no counted episode has a reward ({summary['episodes']['counted']} counted)",
                       ha="center", va="center", fontsize=9)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    temporary = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(temporary, dpi=100)
    plt.close(figure)
    temporary.replace(path)
