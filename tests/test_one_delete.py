"""One `POST /delete` per session (issue 41, item 12): a session the environment ended (a tool that raised) is torn
down by the SDK at once, and closing it later must not ask the server again; a session closed the usual way, or
closed while its episode's reset is still to come, is asked once too. On the SDK's own server
(tests/envs/brittle.py), read from its log of requests per session."""

import collections
import time

import pytest
from orsgen.runtime import episode_of

from tests.harness.generation import served
from tests.harness.servers import settle


@pytest.fixture(scope="module")
def brittle(tmp_path_factory):
    """(server, module) of tests.envs.brittle:Brittle, served with request logging."""
    with served("tests.envs.brittle:Brittle", tmp_path_factory.mktemp("one_delete"), "brittle_once") as found:
        yield found


def deletes(server) -> collections.Counter[str]:
    return collections.Counter(e["session"] for e in server.log() if e["request"] == "POST /delete")


def test_a_session_the_environment_ended_is_deleted_once(brittle):
    server, mod = brittle
    env = mod.Brittle()
    env.reset(task_index=1)
    ended = episode_of(env).session.sid
    with pytest.raises(mod.ToolError, match="the environment ended the session"):
        env.crash()
    deadline = time.monotonic() + 30  # the SDK tears the session down at once: wait for its request
    while not deletes(server)[ended]:
        assert time.monotonic() < deadline, "the session the tool ended was never deleted"
        time.sleep(0.05)
    env.reset(task_index=2)  # closes the ended one: nothing left to ask the server
    usual = episode_of(env).session.sid
    assert env.score() == "scored"
    mod.close_all()
    settle()
    assert server.open_sessions() == []
    seen = deletes(server)
    assert (seen[ended], seen[usual]) == (1, 1), seen
