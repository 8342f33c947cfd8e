"""The generator's one ast.parse survives CPython 3.11's spurious recursion-depth SystemError (gh-106905), and only
that error."""

import ast

import pytest
from orsgen.model import typeddicts


def failing_once(message: str):
    real, calls = ast.parse, []

    def parse(src: str, *args, **kwargs):
        calls.append(src)
        if len(calls) == 1:
            raise SystemError(message)
        return real(src, *args, **kwargs)

    return parse, calls


def test_a_spurious_recursion_depth_mismatch_is_parsed_again(monkeypatch):
    parse, calls = failing_once("AST constructor recursion depth mismatch (before=159, after=212)")
    monkeypatch.setattr(ast, "parse", parse)
    assert typeddicts.names_used(["x: Foo = bar"]) == {"x", "Foo", "bar"}
    assert len(calls) == 2


def test_another_system_error_is_raised(monkeypatch):
    parse, calls = failing_once("something else")
    monkeypatch.setattr(ast, "parse", parse)
    with pytest.raises(SystemError, match="something else"):
        typeddicts.names_used(["x = 1"])
    assert len(calls) == 1
