"""orsgen's runtime: what generated adapter modules import at training time. It never imports the generator.

A generated module states the runtime API it was written for (``require``); this package keeps that API stable
within a major version, so a runtime fix reaches every committed adapter with ``pip install -U orsgen`` and no
regeneration.
"""

from orsgen import __version__
from orsgen.runtime.adapter import UNSET, Adapter, close_all
from orsgen.runtime.errors import DriftError, StartError, ToolError, WrongServer, named
from orsgen.runtime.groups import group_reward
from orsgen.runtime.pinned import Pinned, one_type
from orsgen.runtime.rewards import finished_reward, outcome_reward, shaped_reward, terminal_reward, total_reward

API = 1  # the contract between generated modules and this runtime; a module written for another API refuses to load

__all__ = [
    "API", "UNSET", "Adapter", "DriftError", "Pinned", "StartError", "ToolError", "WrongServer", "close_all",
    "finished_reward", "group_reward", "named", "one_type", "outcome_reward", "require", "shaped_reward", "terminal_reward",
    "total_reward",
]


def require(api: int, module: str) -> None:
    """Called first by a generated module: refuse, in one line, a runtime that does not speak its API."""
    if api != API:
        raise ImportError(
            f"{module} was generated for orsgen runtime API {api}, but the installed orsgen {__version__} provides "
            f"API {API}: regenerate the module with this orsgen (the command is in its header), or install an "
            f"orsgen release with runtime API {api}"
        )
