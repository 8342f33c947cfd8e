"""`Episode` alone, against a stand-in adapter and tool outputs: what its calls record, when it is void and why
(the episode's call and time limits), the reward read once, and its one end. Served: tests/test_episodes.py."""

from dataclasses import dataclass, field
from typing import Any

import pytest
from orsgen.runtime import hooks
from orsgen.runtime.budgets import Budgets
from orsgen.runtime.episode import Episode, Unscored
from orsgen.runtime.errors import ToolError
from orsgen.runtime.settings import Settings


class Adapter:
    """What an episode needs of its adapter: an object it can hold weakly."""


@dataclass
class Text:
    text: str
    type: str = "text"


@dataclass
class Output:
    """A tool's output as the SDK gives it."""

    blocks: list[Any] = field(default_factory=lambda: [Text("ok")])
    reward: float | None = None
    metadata: dict[str, Any] | None = None
    finished: bool = False


@pytest.fixture
def ends():
    heard: list = []
    hooks.add("episode_end", heard.append)
    yield heard
    hooks.remove("episode_end", heard.append)


def opened(adapter: Adapter, **kw: Any) -> Episode[Adapter]:
    episode = Episode(adapter, "train", 3, **kw)
    episode.session = object()  # type: ignore[assignment]  # what usable() hands the call
    return episode


def test_outputs_keep_the_last_reward_the_metadata_and_finished():
    adapter = Adapter()
    episode = opened(adapter)
    assert episode.record("look", Output([Text("a"), Text("b")])) == ("a\nb", episode.budgets.cap("x", "")[1])
    episode.record("answer", Output(reward=0.5, metadata={"n": 1}))
    episode.record("answer", Output(reward=None, finished=True))
    assert (episode.reward, episode.rewards, episode.metadata, episode.finished) == (0.5, [None, 0.5, None],
                                                                                     {"n": 1}, True)
    assert episode.unscored() is None


def test_an_episode_no_tool_scored_gives_unscored_reward_and_says_why():
    adapter = Adapter()
    episode = opened(adapter, settings=Settings(unscored_reward=-1.0))
    assert episode.unscored() is Unscored.NO_TOOL_SCORED
    assert episode.reward_read() == -1.0


def test_the_reward_is_read_once_and_the_end_emitted_once(ends):
    adapter = Adapter()
    episode = opened(adapter)
    episode.record("answer", Output(reward=1.0))
    assert episode.reward_read() == 1.0
    episode.end(None)
    assert [(e.task_index, e.scored, e.reward, e.reason) for e in ends] == [(3, True, 1.0, None)]


def test_a_claimed_episode_gives_the_trainer_none_from_get_reward(ends):
    adapter = Adapter()
    episode = opened(adapter)
    episode.record("answer", Output(reward=1.0))
    assert episode.claim(0.25) == 0.25
    assert episode.reward_read() is None
    assert [e.reward for e in ends] == [0.25]


def test_max_tool_calls_voids_the_episode_at_the_call_past_it_and_every_later_one_fails(ends):
    adapter = Adapter()
    episode = opened(adapter, budgets=Budgets({"max-tool-calls": 2}))
    episode.usable("look")
    episode.usable("look")
    for _ in range(2):
        with pytest.raises(ToolError) as refused:
            episode.usable("look")
        assert str(refused.value) == ("look: this episode is not scored: the model called tools more than its 2 "
                                      "times (max-tool-calls, pinned in the module)")
    episode.record("answer", Output(reward=1.0))
    assert episode.unscored() is Unscored.TOO_MANY_CALLS
    assert episode.reward_read() is None
    assert [(e.scored, e.reason) for e in ends] == [(False, "too_many_calls")]


def test_a_call_after_the_episode_timeout_voids_it():
    adapter = Adapter()
    episode = opened(adapter, budgets=Budgets({"episode-timeout": 10}), began=0.0)  # reset long ago
    with pytest.raises(ToolError, match=r"^look: this episode is not scored: it ran past its 10s from reset "
                                        r"\(episode-timeout, pinned in the module\)$"):
        episode.usable("look")
    assert episode.unscored() is Unscored.TIMED_OUT


def test_a_call_without_a_session_or_after_the_environment_ended_it_is_one_line():
    adapter = Adapter()
    unopened = Episode(adapter, "train", 0)
    with pytest.raises(ToolError, match=r"^look: no episode is open \(reset\(\) was not called\)$"):
        unopened.usable("look")
    episode = opened(adapter)
    episode.ended_by_environment("session expired")
    assert episode.finished
    with pytest.raises(ToolError, match=r"^look: the environment ended this episode's session \(session expired\)"):
        episode.usable("look")
    episode.closed = "the next reset closed it"
    with pytest.raises(ToolError, match=r"^look: this episode is over: the next reset closed it$"):
        episode.usable("look")


def test_an_adapters_first_episode_never_began_and_emits_no_end(ends):
    adapter = Adapter()
    Episode(adapter, "train").end(None)
    assert ends == []


def test_a_refused_start_is_unscored_not_started_whatever_a_tool_returned():
    adapter = Adapter()
    episode = opened(adapter)
    episode.refuse(Unscored.NOT_STARTED, "the server answered 503")
    episode.record("answer", Output(reward=1.0))
    assert episode.unscored() is Unscored.NOT_STARTED
    assert episode.claim(1.0) is None
