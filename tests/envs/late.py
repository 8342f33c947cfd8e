"""The echo environment whose first session start per task is slow where a start cannot be given up on the server:
its constructor, which the SDK's `POST /create` runs before it answers (setup() runs after). With LATE_SECONDS=s
(2.5) the first construction of each task's environment takes that long, later ones none: a client that stops
waiting before then and retries gets a session at once, and the server still opens the first one after it gave up.
Counted in the server process."""

import os
import threading
import time
from typing import ClassVar

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
