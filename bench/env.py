"""Benchmark ORS environments, served on 127.0.0.1 behind a request-counting middleware.

`python bench/env.py bench --port N` serves `Bench` (80 tasks, one `echo` tool); `python bench/env.py wide --port N`
serves `Wide` (100 tools with enums, optional, nullable, nested and array arguments).

The middleware counts every request by "METHOD /path" (`GET /_bench/counts` returns them, `POST /_bench/reset`
clears them) and sleeps `BENCH_LATENCY_MS` before each ORS request, to emulate a remote environment;
`BENCH_START_MS` makes every session's start (its `setup`, which the prompt waits for) take that long, as a sandbox's;
`BENCH_TOOL_MS` makes every `echo` call take that long on the server, as a command in a sandbox does.
"""

import argparse
import asyncio
import os
from collections import Counter
from enum import Enum
from typing import Any, Literal

from openreward.environments import Environment, GroupCandidate, GroupScore, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field, create_model

HOST = "127.0.0.1"
NUM_TASKS = 80
WORDS = ["apple", "grape", "lemon", "mango", "peach", "plum", "kiwi", "lime"]


class EchoParams(BaseModel):
    text: str = Field(description="The text to echo back")


class Bench(Environment):
    """Echo the task's word back with the `echo` tool."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [
            {"id": f"{split}-{i}", "word": WORDS[i % len(WORDS)], "text": f"Task {i}: echo {WORDS[i % len(WORDS)]}"}
            for i in range(NUM_TASKS)
        ]

    async def setup(self) -> None:
        """BENCH_START_MS: a sandbox's start, which the session's prompt waits for (the SDK's server gates it)."""
        start_ms = float(os.environ.get("BENCH_START_MS", "0"))
        if start_ms:
            await asyncio.sleep(start_ms / 1000)

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=self.task_spec["text"])]

    @tool
    async def echo(self, params: EchoParams) -> ToolOutput:
        """Echo text back. Reward 1.0 when it is the task's word, 0.0 otherwise."""
        tool_ms = float(os.environ.get("BENCH_TOOL_MS", "0"))  # a sandbox's command (bench/slow_tools.py)
        if tool_ms:  # awaited, not slept on a thread: the server's calls of different sessions overlap as they would
            await asyncio.sleep(tool_ms / 1000)
        hit = params.text.strip() == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text=params.text)], reward=1.0 if hit else 0.0, finished=False)

    def score_group(self, candidates: list[GroupCandidate]) -> list[GroupScore]:  # type: ignore[override]
        """Group scoring (the "with group_reward" rows): 1.0 for each candidate that echoed the task's word."""
        word = self.task_spec["word"]
        return [GroupScore(reward=float(any(b.type == "tool_call" and b.input.get("text") == word
                                            for m in c.messages for b in m.blocks))) for c in candidates]


# The 100-tool environment: five argument shapes, cycled, so the schemas hold every construct orsgen maps.
class Unit(str, Enum):
    metric = "metric"
    imperial = "imperial"


class Point(BaseModel):
    x: float = Field(description="Horizontal position")
    y: float = Field(description="Vertical position")
    label: str | None = Field(default=None, description="Optional label")


class Filter(BaseModel):
    field: str = Field(description="Column to filter on")
    op: Literal["eq", "lt", "gt", "contains"] = Field(default="eq", description="Comparison")
    values: list[str] = Field(default_factory=list, description="Values to compare with")


SHAPES: list[dict[str, Any]] = [
    {  # enums (inline Literal and a $ref Enum), bounded optional int
        "mode": (Literal["fast", "exact", "fuzzy"], Field(description="Search mode")),
        "unit": (Unit, Field(default=Unit.metric, description="Unit system")),
        "limit": (int, Field(default=10, ge=1, le=100, description="Maximum results")),
    },
    {  # nullable, arrays of scalars, default_factory
        "query": (str, Field(min_length=1, description="Query text")),
        "tags": (list[str], Field(default_factory=list, description="Tags to match")),
        "cursor": (str | None, Field(default=None, description="Page cursor, null for the first page")),
    },
    {  # nested objects, required and optional
        "origin": (Point, Field(description="Start point")),
        "target": (Point | None, Field(default=None, description="End point, if any")),
        "weights": (dict[str, float], Field(default_factory=dict, description="Named weights")),
    },
    {  # arrays of objects, booleans, numbers
        "filters": (list[Filter], Field(description="Filters, all must hold")),
        "strict": (bool, Field(default=False, description="Fail on unknown fields")),
        "threshold": (float, Field(default=0.5, ge=0.0, le=1.0, description="Score threshold")),
    },
    {  # unions and nested arrays
        "key": (int | str, Field(description="Record id or name")),
        "matrix": (list[list[int]], Field(default_factory=list, description="Rows of integers")),
        "order": (Literal["asc", "desc"] | None, Field(default=None, description="Sort order")),
    },
]
VERBS = ["search", "fetch", "route", "query", "lookup"]


def _wide_tool(index: int) -> tuple[str, Any]:
    shape = index % len(SHAPES)
    name = f"{VERBS[shape]}_{index:03d}"
    params = create_model(f"{name.title().replace('_', '')}Params", **SHAPES[shape])

    def run(self: Environment, params: BaseModel) -> ToolOutput:
        return ToolOutput(blocks=[TextBlock(text=params.model_dump_json())], reward=None, finished=False)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"Tool {index} of 100 ({VERBS[shape]}): returns its arguments as JSON."
    run.__annotations__ = {"params": params, "return": ToolOutput}  # the SDK reads the schema from the hints
    return name, tool(run)


class Wide(Environment):
    """100 tools of varied argument shapes; the tasks are the Bench ones."""

    list_splits = Bench.list_splits
    list_tasks = Bench.list_tasks
    get_prompt = Bench.get_prompt


for _name, _fn in map(_wide_tool, range(100)):
    setattr(Wide, _name, _fn)


class CountingApp:
    """ASGI wrapper: count requests by method and path, add a fixed latency, expose the counts under /_bench/."""

    def __init__(self, app: Any, latency_s: float) -> None:
        self.app = app
        self.latency_s = latency_s
        self.counts: Counter[str] = Counter()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from starlette.responses import JSONResponse

        path = scope["path"]
        if path == "/_bench/counts":
            return await JSONResponse(dict(self.counts))(scope, receive, send)
        if path == "/_bench/reset":
            self.counts.clear()
            return await JSONResponse({})(scope, receive, send)
        self.counts[f"{scope['method']} {path}"] += 1
        if self.latency_s and path != "/health":
            await asyncio.sleep(self.latency_s)
        await self.app(scope, receive, send)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("env", choices=["bench", "wide"])
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    import uvicorn
    from openreward.environments import Server

    server = Server([Bench if args.env == "bench" else Wide])
    latency_s = float(os.environ.get("BENCH_LATENCY_MS", "0")) / 1000
    uvicorn.run(CountingApp(server.app, latency_s), host=HOST, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
