"""The example echo environment with sessions that take 0.3 s to start, so that starts which overlap (or do not)
show in the server's log of `/create` requests."""

import time

from examples.echo import Echo


class SlowEcho(Echo):
    def setup(self) -> None:
        time.sleep(0.3)
