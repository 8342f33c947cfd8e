"""The example echo environment whose tool listing never ends once the server is up (a hung server, as far as a
client can tell): it touches the file named by STALLED_MARK when asked, so a test knows the client is waiting."""

import os
import time
from pathlib import Path
from typing import Any

from examples.echo import Echo


class Stalled(Echo):
    _listed = 0

    @classmethod
    def list_tools(cls, *args: Any, **kwargs: Any) -> Any:
        cls._listed += 1
        if cls._listed > 1:  # the first listing is the server's own check at start-up
            Path(os.environ["STALLED_MARK"]).touch()
            time.sleep(120)
        return super().list_tools(*args, **kwargs)
