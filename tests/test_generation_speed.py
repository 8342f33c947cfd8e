"""The fast formatting path (issue 12: generation under a second for 100 tools) changes no byte.

`blackfast.format_module` lays the SNAPSHOT literal out itself and formats the class members one by one through a cache.
Here every corpus file, golden case and the benchmark's 100-tool environment goes through both paths: the module text
must be byte for byte what plain `black.format_str(text, mode=MODE)` makes of the whole. No timing here: the
benchmark prints the figures.
"""

import json
from pathlib import Path
from typing import Any

import black
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from orsgen import blackfast as render
from orsgen import normalize, pipeline
from orsgen import render as render_stage
from orsgen.config import Job
from orsgen.source import Source, _snap

from tests.harness.tool_lists import CORPORA, GOLDEN, wide_tools


def module_texts(data: Any, env: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, str]]:
    """(template output, snapshot, fast formatted module) of the module for data, with plain and async tools."""
    seen: list[tuple[str, Any, str]] = []
    fast = render.format_module

    def spy(text: str, snap: Any = None) -> str:
        seen.append((text, snap, fast(text, snap)))
        return seen[-1][2]

    monkeypatch.setattr(render_stage, "format_module", spy)  # where the render stage calls it
    tools, rest = normalize.tool_list(data, "<tools>")  # as pipeline.from_tools, which has no async_tools
    extra: dict[str, Any] = {k: rest[k] for k in ("terminal_tool", "splits") if k in rest}
    source = Source(target="<tools>", url=None, deployment=env, env=env, name=env, split="train")
    for async_tools in (False, True):
        pipeline.build(source, _snap(env, tools, extra), Job("<tools>", Path("adapter.py"), async_tools=async_tools))
    return seen


@pytest.mark.parametrize("path", CORPORA + GOLDEN, ids=[f"{p.parent.name}/{p.name}" for p in CORPORA + GOLDEN])
def test_fast_path_is_black(path, monkeypatch):
    texts = module_texts(json.loads(path.read_text()), path.stem.replace("-", "_"), monkeypatch)
    assert len(texts) == 2
    for text, _, fast in texts:
        assert fast == black.format_str(text, mode=render.MODE)


@pytest.mark.slow
def test_fast_path_is_black_for_the_100_tool_benchmark(monkeypatch):
    texts = module_texts(wide_tools(), "wide", monkeypatch)
    for text, snap, fast in texts:
        assert render.SNAPSHOT_HEAD + "{" in fast  # the fast path was taken
        assert fast == black.format_str(text, mode=render.MODE)


def test_every_line_of_a_module_goes_to_black_when_the_fast_path_does_not_apply():
    odd = "x = {'a': 1}\n\n\nclass A:\n    def f(self):\n        return  1\n"
    assert render.format_module(odd) == black.format_str(odd, mode=render.MODE)
    assert render.format_module(odd, snap={"a": 1}) == black.format_str(odd, mode=render.MODE)


# --- the SNAPSHOT literal, for any JSON value ---------------------------------------------------------------------

TEXTS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["'", '"', "'\"", "\\", "\\x41", "é", "名前", "🚀", "\x00", "\n", "\u2028", "\u0301", "a" * 60,
                     "b" * 117]),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20),
                    st.floats(allow_nan=False, allow_infinity=False), TEXTS)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(TEXTS, inner, max_size=5)),
                      max_leaves=40)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(TEXTS, VALUES, max_size=5))
def test_snapshot_literal_is_blacks(value):
    statement = render.SNAPSHOT_HEAD + repr(value) + "\n"
    assert render.literal_statement(render.SNAPSHOT_HEAD, value) == black.format_str(statement, mode=render.MODE)


def test_snapshot_literal_refuses_what_is_not_json():
    assert render.literal_statement(render.SNAPSHOT_HEAD, {"a": (1, 2)}) is None
    assert render.literal_statement(render.SNAPSHOT_HEAD, {"a": float("nan")}) is None
    assert render.literal_statement(render.SNAPSHOT_HEAD, {1: 2}) is None


def test_text_black_cannot_parse_gets_blacks_own_error():
    broken = "class A:\n    def f(self):\n        pass\n\n    def g(self):\n        pass\n\n    def h(self):\n        pass\nx = (\n"
    with pytest.raises(black.InvalidInput) as ours:
        render.format_module(broken)
    with pytest.raises(black.InvalidInput) as blacks:
        black.format_str(broken, mode=render.MODE)
    assert str(ours.value) == str(blacks.value)
