"""The one budget table (issue 43): each key's spelling, kind and bounds in one row (`settings.BUDGET_KEYS`), read by
the generator's options, the runtime's settings and a module's pins alike."""

import pytest
from orsgen import config
from orsgen.errors import OrsgenError
from orsgen.runtime import budgets, settings
from orsgen.runtime.settings import BUDGET_KEYS, Refused


def test_the_generators_options_are_the_tables_rows():
    wide = [row.key for row in BUDGET_KEYS if row.setting is not None]
    assert [o.name for o in config.BUDGET_OPTIONS] == [*wide, "tools"]
    assert [o.name for o in config.TOOL_BUDGET_OPTIONS] == [row.key for row in BUDGET_KEYS if row.per_tool]
    for option in config.BUDGET_OPTIONS[:-1]:
        row = settings.BUDGET_BY_KEY[option.name]
        assert (option.kind, option.help, option.metavar, option.choices) == (row.kind, row.help, row.metavar,
                                                                              row.choices)


def test_the_runtimes_settings_and_pins_are_the_tables_rows():
    assert budgets.SETTING == {row.key: row.setting for row in BUDGET_KEYS if row.setting is not None}
    assert settings.TOOL_KEYS == tuple(row.key for row in BUDGET_KEYS if row.per_tool)
    assert all(row.setting in settings.BY_NAME for row in BUDGET_KEYS if row.setting)


@pytest.mark.parametrize("row", [row for row in BUDGET_KEYS if row.kind is int], ids=lambda row: row.key)
def test_one_bound_per_key_wherever_a_value_comes_from(row, monkeypatch):
    """The runtime takes `least` from a pin, a setting and a variable alike, and refuses one below in the same words;
    the generator refuses below its own floor (`generated`: a cap it pins that would leave the model nearly nothing),
    never below `least`."""
    low = row.least - 1
    assert settings.budget(row.key, row.least) == row.least
    with pytest.raises(Refused, match=f"^a whole number, {row.least} or more$"):
        settings.budget(row.key, low)
    if row.setting is not None:
        refused = settings.BY_NAME[row.setting].parse
        assert refused(str(row.least), "variable") == row.least
        with pytest.raises(Refused, match=f"^a whole number, {row.least} or more$"):
            refused(low, "attribute")
        counted = {"tokenizer": "gpt2"} if row.key == "max-output-tokens" else {}  # what tokens are counted with
        with pytest.raises(OrsgenError, match=f"at least {row.floor}, not {row.floor - 1}$"):
            config.budgets({row.key: row.floor - 1, **counted}, "t")
        assert config.budgets({row.key: row.floor, **counted}, "t") == {row.key: row.floor, **counted}
    assert row.floor >= row.least


def test_a_tool_budget_and_a_pin_read_a_value_alike():
    assert settings.budget("timeout", 2) == 2.0
    assert settings.BY_NAME["tool_budgets"].parse({"bash": {"timeout": 2}}, "attribute") == {"bash": {"timeout": 2.0}}
    for given in (0, -1, "soon"):
        with pytest.raises(Refused, match="^a number of seconds above 0$"):
            settings.budget("timeout", given)
    with pytest.raises(Refused, match="^one of 'head', 'tail', 'middle'$"):
        settings.budget("truncate", "both")
    with pytest.raises(Refused, match="^no budget 'max-output-lines'$"):
        settings.budget("max-output-lines", 3)


def test_limit_says_where_an_episode_limit_came_from():
    pinned = budgets.Budgets({"max-tool-calls": 3, "episode-timeout": 9})
    assert pinned.limit("max-tool-calls") == (3, "max-tool-calls, pinned in the module")
    given = budgets.Budgets({"max-tool-calls": 3}, settings.resolve(None, {"max_tool_calls": 5}))
    assert given.limit("max-tool-calls") == (5, "the max_tool_calls setting")
    assert given.limit("episode-timeout") == (None, "episode-timeout, pinned in the module")
