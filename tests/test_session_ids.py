"""Session ids asked for ahead (runtime/sids.py, issue 43 8b) look to the server as the SDK's own start: the same
requests with the same headers (X-Secrets byte for byte), the session opened under the id its `/create_session`
handed out, no id used twice, and an id nobody took given back with the SDK's `/delete_session`. Asserted on what
the SDK's own Server saw; the trainer's side (ids asked for once TRL read a batch's rewards) is
test_open_ahead.py's."""

import pytest
from orsgen.runtime.runner import runner_of

from tests.harness.generation import served

SECRETS = {"OPENAI_API_KEY": "sk-not-a-real-key"}  # a well-known name: the SDK sends it in X-Secrets
ASIDE = ("x-session-id", "content-length")  # what differs between two sessions' requests by nature


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    with served("tests.envs.slow_echo:SlowEcho", tmp_path_factory.mktemp("ids"), "slow_echo") as found:
        yield found


def by_session(server, since: int) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Each session id's requests since the `since`-th, in arrival order: (request, headers but those ASIDE)."""
    found: dict[str, list[tuple[str, dict[str, str]]]] = {}
    log, headers = server.log()[since:], server.headers()[since:]  # one entry each per request, in the same order
    for entry, sent in zip(log, headers[:len(log)], strict=True):
        kept = {k: v for k, v in sent["headers"].items() if k not in ASIDE}
        found.setdefault(entry["session"], []).append((entry["request"], kept))
    return found


def test_a_start_under_an_id_asked_for_ahead_sends_what_the_sdks_own_start_sends(echo):
    server, mod = echo
    env = mod.Slowecho(secrets=SECRETS)
    env.reset(task_index=0)  # the process's first start also checks the tools for drift: not what is compared
    since = len(server.log())
    env.reset(task_index=1)  # the SDK's own start
    runner_of(env).sids().want(1)  # what a batch asks for once TRL has read its rewards
    env.reset(task_index=2)  # under that id
    mod.close_all()
    sessions = by_session(server, since)
    own, ahead = [made for made in sessions.values() if any(request == "POST /create" for request, _ in made)]
    assert [r for r, _ in own] == [r for r, _ in ahead] == [
        "POST /create_session", "POST /create", "GET /slowecho/prompt", "POST /delete", "POST /delete_session"]
    assert [h for _, h in own] == [h for _, h in ahead]  # the same headers, X-Secrets included
    assert "x-secrets" in own[0][1] and own[0][1]["x-secrets"] == own[1][1]["x-secrets"]
    assert len(sessions) == 3  # those two, and the first reset's (closed at the second): nothing else


def test_an_id_nobody_took_is_given_back_with_the_sdks_delete_session(echo):
    server, mod = echo
    env = mod.Slowecho(secrets=SECRETS)
    env.reset(task_index=0)
    since = len(server.log())
    runner_of(env).sids().want(2)
    mod.close_all()
    sessions = by_session(server, since)
    unused = [made for made in sessions.values() if made[0][0] == "POST /create_session"
              and not any(request == "POST /create" for request, _ in made)]
    assert [[r for r, _ in made] for made in unused] == [["POST /create_session", "POST /delete_session"]] * 2
    closed = next(made for made in sessions.values() if made[0][0] == "POST /delete")  # the episode's, at close_all
    assert unused[0][1][1] == closed[-1][1]  # the same /delete_session as a session's own
    assert server.open_sessions() == []
