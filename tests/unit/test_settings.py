"""`settings.resolve` alone: where a value comes from (argument, variable, class attribute, default), what is
refused and how the refusal reads, and the tool budgets' and task pools' parsing."""

import pytest
from orsgen.runtime import settings
from orsgen.runtime.settings import DEFAULTS, POOLS, resolve


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch):
    for row in settings.SETTINGS:
        if row.variable:
            monkeypatch.delenv(row.variable, raising=False)


class Mine:
    """An adapter class as a generated module's: settings as class attributes."""

    start_retries = 5
    open_ahead = "next-step"


def test_no_class_no_variable_gives_the_defaults():
    assert resolve(None) == DEFAULTS


def test_argument_then_variable_then_attribute_then_default(monkeypatch):
    assert resolve(Mine).start_retries == 5
    assert resolve(Mine, {"start_retries": 1}).start_retries == 1
    monkeypatch.setenv("ORSGEN_OPEN_AHEAD", "off")
    assert resolve(Mine).open_ahead is False  # the variable over the attribute
    assert resolve(Mine, {"open_ahead": True}).open_ahead is True  # the argument over the variable
    assert resolve(Mine).reset_timeout == DEFAULTS.reset_timeout


def test_a_tool_method_named_as_a_setting_is_not_read_as_its_value():
    class Shadowed:
        def truncate(self, text: str) -> str:  # a tool of the environment, generated before the setting existed
            return text

    assert resolve(Shadowed).truncate is None


@pytest.mark.parametrize(("variable", "raw", "name", "expected"), [
    ("ORSGEN_DRIFT_CHECK", "no", "check_drift", False),
    ("ORSGEN_DRIFT_CHECK", " ON ", "check_drift", True),
    ("ORSGEN_OPEN_AHEAD", "next-step", "open_ahead", "next-step"),
    ("ORSGEN_RESET_TIMEOUT", "2.5", "reset_timeout", 2.5),
    ("ORSGEN_EPISODE_TIMEOUT", "30", "episode_timeout", 30.0),
    ("ORSGEN_MAX_TOOL_CALLS", " 4 ", "max_tool_calls", 4),
    ("ORSGEN_TASK_ORDER", "Difficulty", "task_order", "difficulty"),
])
def test_variables_are_read_as_text(monkeypatch, variable, raw, name, expected):
    monkeypatch.setenv(variable, raw)
    assert getattr(resolve(None), name) == expected


@pytest.mark.parametrize(("variable", "raw", "says"), [
    ("ORSGEN_DRIFT_CHECK", "maybe", "ORSGEN_DRIFT_CHECK='maybe': one of 0 (off), 1 (on)"),
    ("ORSGEN_RESET_TIMEOUT", "0", "ORSGEN_RESET_TIMEOUT='0': a number of seconds above 0 is needed (default 120)"),
    ("ORSGEN_TOOL_TIMEOUT", "inf", "ORSGEN_TOOL_TIMEOUT='inf': a number of seconds above 0 is needed (default 900)"),
    ("ORSGEN_EPISODE_TIMEOUT", "-1", ("ORSGEN_EPISODE_TIMEOUT='-1': a number of seconds above 0 is needed (unset: "
                                     "no limit)")),
    ("ORSGEN_MAX_TOOL_CALLS", "0", "ORSGEN_MAX_TOOL_CALLS='0': a whole number, 1 or more"),
    ("ORSGEN_OPEN_AHEAD", "later", "ORSGEN_OPEN_AHEAD='later': one of 0 (off), 1 (on), next-step"),
    ("ORSGEN_TASK_ORDER", "random", "ORSGEN_TASK_ORDER='random': one of 'shuffle', 'difficulty'"),
])
def test_a_bad_variable_is_refused_in_one_line_naming_it(monkeypatch, variable, raw, says):
    monkeypatch.setenv(variable, raw)
    with pytest.raises(ValueError) as refused:
        resolve(None)
    assert str(refused.value) == says


def test_bad_arguments_and_attributes_name_where_they_were_given():
    with pytest.raises(ValueError, match=r"^Mine\(settings=\{'start_failures': 'ignore'\}\): 'skip' or 'raise'$"):
        resolve(Mine, {"start_failures": "ignore"})

    class Bad:
        max_images = -1

    with pytest.raises(ValueError, match=r"^Bad\.max_images = -1: a whole number, 0 or more$"):
        resolve(Bad)
    with pytest.raises(TypeError, match=r"^Adapter\(settings=\{'task_seed': '3'\}\): an int"):
        resolve(None, {"task_seed": "3"})
    with pytest.raises(ValueError, match=r"^Mine\(settings=\.\.\.\): no setting 'retries': one of open_in_background"):
        resolve(Mine, {"retries": 3})


def test_open_ahead_as_an_argument_takes_only_its_three_values():
    with pytest.raises(ValueError, match="one of True, False, 'next-step'"):
        resolve(None, {"open_ahead": "yes"})


def test_tool_budgets_are_parsed_per_tool_and_key():
    given = resolve(None, {"tool_budgets": {"read": {"max-output-chars": 10, "timeout": 3}}})
    assert given.tool_budgets == {"read": {"max-output-chars": 10, "timeout": 3.0}}
    with pytest.raises(ValueError, match=r"tool 'read': no budget 'max-tool-calls': one of max-output-chars"):
        resolve(None, {"tool_budgets": {"read": {"max-tool-calls": 3}}})
    with pytest.raises(ValueError, match=r"tool 'read': timeout: a number of seconds above 0$"):
        resolve(None, {"tool_budgets": {"read": {"timeout": True}}})


def test_task_pools_override_the_defaults_key_by_key():
    pools = resolve(None, {"task_pools": {"hard": 0.5, "solved": 1}}).task_pools
    assert pools == {**POOLS, "hard": 0.5, "solved": 1}


@pytest.mark.parametrize(("pools", "says"), [
    ({"recent": 0}, "recent: the groups per task that decide its pool, 1 or more"),
    ({"floor": 1.5}, "floor: the share of draws made over every task, between 0 and 1"),
    ({"hard": -1}, "hard: a weight, a number 0 or more"),
    ({"solved": "all"}, "solved: a reward (a number), or None"),
    ({"medium": 1}, "no key 'medium': one of normal, hard, easy, floor, recent, solved"),
    ({"normal": 0, "hard": 0, "easy": 0, "floor": 0}, "every weight is 0 and the floor too: no task could be drawn"),
])
def test_task_pools_no_run_could_draw_with_are_refused(pools, says):
    with pytest.raises(ValueError) as refused:
        resolve(None, {"task_pools": pools})
    assert says in str(refused.value)


def test_the_settings_table_has_a_row_per_setting_with_its_default():
    rows = settings.table().splitlines()[2:]
    assert len(rows) == len(settings.SETTINGS)
    assert rows[0].startswith("| `open_in_background` | `open_in_background` |  | `False` |")
    assert any(row.startswith("| `reset_timeout` |  | `ORSGEN_RESET_TIMEOUT` | `120.0` |") for row in rows)


def test_a_setting_read_from_its_variable_alone(monkeypatch):
    monkeypatch.setenv("ORSGEN_CLOSE_TIMEOUT", "3")
    assert settings.variable("close_timeout") == 3.0
