"""Echo environments whose sessions are slow to start.

`Late`: the first session start per task is slow where a start cannot be given up on the server: its constructor,
which the SDK's `POST /create` runs before it answers (setup() runs after). With LATE_SECONDS=s (2.5) the first
construction of each task's environment takes that long, later ones none: a client that stops waiting before then
and retries gets a session at once, and the server still opens the first one after it gave up. Counted in the server
process. `Unhurried`: every start takes its time, and so does its tool."""

import os
import threading
import time
from typing import ClassVar

from openreward.environments import TextBlock, ToolOutput, tool
from pydantic import BaseModel

from examples.echo import Echo


class Late(Echo):
    _built: ClassVar[set[str]] = set()
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, task_spec: dict = {}, secrets: dict = {}) -> None:  # noqa: B006 - the SDK's signature
        with Late._lock:
            first = str(task_spec.get("id")) not in Late._built
            Late._built.add(str(task_spec.get("id")))
        if first:
            time.sleep(float(os.environ.get("LATE_SECONDS", "2.5")))
        super().__init__(task_spec, secrets)


class PauseParams(BaseModel):
    seconds: float = 0.5


class Unhurried(Echo):
    """Sessions that take UNHURRIED_START seconds (1.5) to start (setup(): the prompt waits for it), and a tool that
    takes its time: tests/test_episode_timeout_start.py."""

    def setup(self) -> None:
        time.sleep(float(os.environ.get("UNHURRIED_START", "1.5")))

    @tool
    def pause(self, params: PauseParams) -> ToolOutput:
        """Wait, then score."""
        time.sleep(params.seconds)
        return ToolOutput(blocks=[TextBlock(text=f"paused {params.seconds}s")], reward=1.0, finished=False)
