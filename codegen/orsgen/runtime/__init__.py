"""orsgen's runtime: what generated adapter modules import at training time. It never imports the generator.

A generated module states the runtime API it was written for (``require``); this package keeps that API stable
within a major version, so a runtime fix reaches every committed adapter with ``pip install -U orsgen`` and no
regeneration.
"""

from typing import Any

from orsgen import __version__
from orsgen.runtime import hooks, recorder
from orsgen.runtime.adapter import UNSET, Adapter, episode_of
from orsgen.runtime.episode import Episode, Unscored
from orsgen.runtime.errors import DriftError, StartError, ToolError, WrongServer, named
from orsgen.runtime.groups import group_reward
from orsgen.runtime.pinned import Pinned
from orsgen.runtime.recorder import Recorder
from orsgen.runtime.rewards import finished_reward, outcome_reward, shaped_reward, terminal_reward, total_reward
from orsgen.runtime.rows import bundle as bundle_dataset
from orsgen.runtime.rows import one_type
from orsgen.runtime.runner import close_all, open_sessions

API = 1  # the contract between generated modules and this runtime; a module written for another API refuses to load

__all__ = [
    "API", "UNSET", "Adapter", "DriftError", "Episode", "EpisodeMetrics", "Pinned", "Recorder", "StartError",
    "ToolError", "Trajectories", "Unscored", "WrongServer", "bundle_dataset", "close_all", "episode_of", "finished_reward", "group_reward", "hooks",
    "named", "one_type", "open_sessions", "outcome_reward", "require", "shaped_reward", "terminal_reward",
    "total_reward",
]


def __getattr__(name: str) -> Any:
    """EpisodeMetrics and Trajectories on first use: they import transformers (and torch), which generation never
    needs. Type checkers see them as Any: naming their classes here would have them analyse transformers and torch
    (30 s and more) to check any generated module."""
    if name == "EpisodeMetrics":
        from orsgen.runtime.metrics import EpisodeMetrics

        return EpisodeMetrics
    if name == "Trajectories":
        from orsgen.runtime.recording import Trajectories

        return Trajectories
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


recorder.asked()  # a bad ORSGEN_TRAJECTORIES is one line now, before any training (it makes nothing here)


def require(api: int, module: str) -> None:
    """Called first by a generated module: refuse, in one line, a runtime that does not speak its API."""
    if api != API:
        raise ImportError(
            f"{module} was generated for orsgen runtime API {api}, but the installed orsgen {__version__} provides "
            f"API {API}: regenerate the module with this orsgen (the command is in its header), or install an "
            f"orsgen release with runtime API {api}"
        )
