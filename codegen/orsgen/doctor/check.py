"""A check's result (`Check`, one line when printed) and what the checks learn and hand on (`Facts`): the tools,
the split and task the probes use, which calls answered, hung, finished an episode, and the rewards seen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orsgen.doctor.arguments import Made
from orsgen.doctor.probe import Outcome, Probe
from orsgen.doctor.target import Live

PASSED, WARNING, FAILED, SKIPPED, ERROR = "passed", "warning", "failed", "skipped", "error"


@dataclass
class Check:
    """One check's verdict: `summary` is what it found, `fix` what to do (a failure or warning), `details` the rest
    (the JSON output and `-v` carry them), `figures` its numbers."""

    name: str
    status: str
    summary: str
    fix: str | None = None
    details: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    sessions: int = 0

    def line(self) -> str:
        return self.summary + (f"; fix: {self.fix}" if self.fix else "")

    def json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "summary": self.summary, "fix": self.fix,
                "details": self.details, "figures": self.figures, "seconds": round(self.seconds, 3),
                "sessions": self.sessions}


@dataclass(frozen=True)
class Tool:
    """A tool as the environment lists it; the terminal tool (the final message's) too."""

    name: str
    description: str
    schema: dict[str, Any] | None
    terminal: bool = False


@dataclass
class Facts:
    """What the checks share, filled in as they run."""

    live: Live
    probe: Probe
    tools: list[Tool]
    split: str | None = None  # the split the probes use (None: no split has a task)
    tasks: int = 0  # its number of tasks
    made: dict[str, Made] = field(default_factory=dict)  # each tool's arguments made from its schema
    answered: dict[str, Outcome] = field(default_factory=dict)  # each tool's call with them (tools answer)
    finishing: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # calls seen to finish an episode
    honest: list[float] = field(default_factory=list)  # rewards of the episodes of probes made from the schemas
    model: list[float] = field(default_factory=list)  # rewards of a model's episodes (learnable)
    rewards: list[float] = field(default_factory=list)  # every reward seen
    shared: str | None = None  # what isolation found shared between sessions
    varies: str | None = None  # what determinism found to change from run to run

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def working(self) -> list[Tool]:
        """Tools that answered arguments made from their schema, in the order listed."""
        return [t for t in self.tools if t.name in self.answered and self.answered[t.name].kind == "ok"]

    def saw(self, outcomes: list[Outcome]) -> None:
        """Note the finishing calls and rewards among `outcomes`."""
        for outcome in outcomes:
            if outcome.kind != "ok":
                continue
            if outcome.reward is not None:
                self.rewards.append(outcome.reward)
            if outcome.finished and (outcome.tool, outcome.arguments) not in self.finishing:
                self.finishing.append((outcome.tool, outcome.arguments))


def tools_of(snapshot: dict[str, Any]) -> list[Tool]:
    """The tools of a snapshot, the terminal tool last (called with its one argument, the final message)."""
    found = [Tool(t["name"], t.get("description") or "", t.get("input_schema")) for t in snapshot.get("tools", [])]
    terminal = snapshot.get("terminal_tool")
    if isinstance(terminal, dict) and isinstance(terminal.get("name"), str):
        arg = terminal.get("arg")
        schema = ({"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
                  if isinstance(arg, str) else None)
        found.append(Tool(terminal["name"], terminal.get("description") or "", schema, terminal=True))
    return found


def names(tools: list[str], limit: int = 4) -> str:
    """`a, b, c` or `a, b, c and 4 more`."""
    shown = ", ".join(tools[:limit])
    return shown + (f" and {len(tools) - limit} more" if len(tools) > limit else "")
