"""The drift comparison alone (`bounds.changes`, what `orsgen --check` and the runtime's DriftError say, and
`pin.tool_changes`/`option_changes` around it) and the bounds a live tool list is cut to before it is compared.
Against a live server: tests/test_pinning.py, test_hostile_schemas.py."""

from orsgen import pin
from orsgen.runtime import bounds


def echo(**schema):
    return {"name": "echo", "description": "Echo text.", "input_schema": {
        "type": "object", "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
        "required": ["text"], **schema}}


def test_the_same_tools_differ_in_nothing():
    assert bounds.changes([echo()], [echo()]) == []


def test_tools_added_and_removed_are_a_line_each():
    other = {"name": "shout", "input_schema": {}}
    assert bounds.changes([echo()], [other]) == ["+ shout: added", "- echo: removed"]


def test_an_argument_changed_added_removed_or_reordered_is_named():
    live = echo()
    live["input_schema"]["properties"] = {"times": {"type": "number"}, "loud": {"type": "boolean"}}
    live["description"] = "Echo text, louder."
    assert bounds.changes([echo()], [live]) == ["~ echo: description changed", "~ echo: argument loud added",
                                                "~ echo: argument text removed", "~ echo: argument times: type changed"]
    swapped = echo(required=[])
    swapped["input_schema"]["properties"] = dict(reversed(list(swapped["input_schema"]["properties"].items())))
    assert bounds.changes([echo()], [swapped]) == ["~ echo: argument text now optional",
                                                   "~ echo: argument order changed"]


def test_required_flags_and_other_schema_keys_are_named():
    live = echo(required=["text", "times"], additionalProperties=False)
    assert bounds.changes([echo()], [live]) == ["~ echo: argument times now required",
                                                "~ echo: schema additionalProperties changed"]
    assert bounds.changes([live], [echo()]) == ["~ echo: argument times now optional",
                                                "~ echo: schema additionalProperties changed"]


def test_a_pinned_list_edited_into_any_shape_is_compared_without_failing():
    assert bounds.changes("not a list", [echo()]) == ["+ echo: added"]
    assert bounds.changes([{"name": "echo", "input_schema": 7}], [echo()])[0] == "~ echo: description changed"


def test_a_live_tool_past_the_bounds_is_cut_as_the_pinned_one_was_so_it_is_not_drift():
    deep: dict = {"type": "object"}
    node = deep
    for _ in range(bounds.MAX_DEPTH + 5):
        node["properties"] = {"x": {"type": "object"}}
        node = node["properties"]["x"]
    live = {"name": "deep", "description": "d" * (bounds.MAX_DESCRIPTION + 10), "input_schema": deep}
    pinned = bounds.tool(live)
    assert pinned["description"].endswith(f" [... cut by orsgen: {bounds.MAX_DESCRIPTION + 10} characters in all]")
    assert bounds.DEPTH_CUT in repr(pinned["input_schema"])
    assert bounds.changes([pinned], [bounds.tool(live)]) == []


def test_the_canonical_form_sorts_keys_but_keeps_the_parameters_order():
    schema = {"type": "object", "properties": {"z": {"type": "string", "description": "d"}, "a": {"type": "integer"}}}
    shown = bounds.canonical(schema)
    assert list(shown) == ["properties", "type"]
    assert list(shown["properties"]) == ["z", "a"]
    assert list(shown["properties"]["z"]) == ["description", "type"]


def test_the_snapshots_other_keys_and_the_options_changed_are_lines_too():
    old, new = {"tools": [echo()], "build": "1"}, {"tools": [echo()], "build": "2"}
    assert pin.tool_changes(old, new) == ['~ build: "1" -> "2"']
    assert pin.option_changes({"async-tools": True, "tools": {"bash": {"timeout": 30.0}}},
                              {"tools": {"bash": {"timeout": 60.0}}, "max-images": 2}) == [
        "~ option async-tools: true -> (not set)", "~ option max-images: (not set) -> 2",
        "~ option tools.bash.timeout: 30.0 -> 60.0"]


def order(city_type: str = "string", **address_fields):
    """A tool whose nested argument `ship_to` is a class of its own (`$defs/Address`, as pydantic writes it), used
    through another class (`Parcel`) by `parcel`."""
    address = {"type": "object", "properties": {"city": {"type": city_type}, **address_fields}, "required": ["city"]}
    return {"name": "order", "description": "Order.", "input_schema": {
        "type": "object", "$defs": {"Address": address, "Parcel": {"type": "object", "properties": {
            "to": {"$ref": "#/$defs/Address"}}}},
        "properties": {"item": {"type": "string"}, "ship_to": {"$ref": "#/$defs/Address"},
                       "parcel": {"$ref": "#/$defs/Parcel"}}, "required": ["item", "ship_to"]}}


def test_a_nested_arguments_field_is_named_with_the_arguments_that_use_it():
    """Issue 44: a changed field of a nested argument said only `schema $defs changed`."""
    assert bounds.changes([order()], [order("integer", zip={"type": "string"})]) == [
        "~ order: argument ship_to, parcel: Address.zip added",
        "~ order: argument ship_to, parcel: Address.city: type changed"]
    inline = echo()
    inline["input_schema"]["properties"]["text"] = {"type": "object", "properties": {"body": {"type": "string"}}}
    changed = echo()
    changed["input_schema"]["properties"]["text"] = {"type": "object", "properties": {"body": {"type": "integer"}}}
    assert bounds.changes([inline], [changed]) == ["~ echo: argument text.body: type changed"]
