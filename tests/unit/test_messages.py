"""Message texts alone: what the model is shown of a failed tool call (`toolerrors`: one short line, pydantic's
errors one sentence per field, no URLs or session ids) and the one line an error becomes (`client.describe`). The
same through a live server: tests/test_runtime.py::test_validation_errors_reach_the_model_as_one_sentence_per_field."""

import pytest
from orsgen.runtime import client, toolerrors
from orsgen.runtime.toolerrors import MAX_ERROR, MAX_FIELDS, short

# A pydantic validation error list as the SDK's ToolCallError detail holds it (its repr), with a URL and a ctx.
REPR = ("[{'type': 'missing', 'loc': ('text',), 'msg': 'Field required', 'input': {}, "
        "'url': 'https://errors.pydantic.dev/2.9/v/missing'}, {'type': 'value_error', 'loc': ('items', 0, 'name'), "
        "'msg': \"Value error, can't be empty\", 'ctx': {'error': ValueError(\"can't be empty\")}}]")
TEXT = ("2 validation errors for EchoParams\ntext\n  Field required [type=missing, input_value={}, input_type=dict]\n"
        "    For further information visit https://errors.pydantic.dev/2.9/v/missing\ntimes\n  Input should be a valid "
        "integer [type=int_parsing, input_value='x', input_type=str]\n")


def test_a_validation_error_list_is_one_sentence_per_field():
    assert toolerrors._validation_errors(REPR) == ["text: Field required", "items.0.name: Value error, can't be empty"]


def test_pydantics_own_text_is_read_the_same_way():
    assert toolerrors._validation_errors(TEXT) == ["text: Field required", "times: Input should be a valid integer"]


def test_many_fields_are_cut_to_a_few_and_a_count():
    many = ", ".join(f"{{'loc': ('f{i}',), 'msg': 'bad'}}" for i in range(MAX_FIELDS + 3))
    lines = toolerrors._validation_errors(f"[{many}]")
    assert lines[-1] == "and 3 more" and len(lines) == MAX_FIELDS + 1


def test_a_line_loses_urls_session_ids_and_newlines_and_is_bounded():
    said = short("session terminated (sid='abc-123')\n  see https://docs.example/x for more")
    assert said == "session terminated see for more"
    assert short("failed (environment session sid=s1): boom") == "failed: boom"
    long = short("word " * 1_000)
    assert len(long) == MAX_ERROR and long.endswith("...")


@pytest.mark.parametrize(("error", "line"), [
    (TimeoutError(), "TimeoutError: TimeoutError"),
    (ValueError("bad\n   value"), "ValueError: bad value"),
])
def test_an_error_is_one_line_with_its_type(error, line):
    assert client.describe(error) == line


def test_an_error_with_a_status_is_described_without_its_url():
    class HTTPError(Exception):
        status, message = 503, "Service Unavailable"

        def __str__(self) -> str:
            return "503, message='Service Unavailable', url='http://127.0.0.1:9/create'"

    assert client.describe(HTTPError()) == "HTTPError: HTTP 503: Service Unavailable"
    assert client.status(HTTPError()) == 503
    assert client.status(ValueError()) is None


def test_a_retry_chain_is_described_by_its_last_attempt():
    class MaxRetries(Exception):
        errors = (ConnectionRefusedError("refused"), ConnectionResetError("reset by peer"))

    assert client.describe(MaxRetries("3 attempts failed")) == "ConnectionResetError: reset by peer"
