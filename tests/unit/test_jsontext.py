"""`jsontext.dumps`: what a model's lone surrogate becomes in a file (issue 41)."""

import json

from orsgen.runtime import jsontext


def test_a_lone_surrogate_is_written_as_its_escape_and_reads_back_the_same():
    value = {"arguments": {"text": "half \ud83d of a pair", "key\udc00": ["\udfff"]}, "ok": "é 😀"}
    text = jsontext.dumps(value)
    data = text.encode("utf-8")  # json.dumps(ensure_ascii=False) alone raises UnicodeEncodeError here
    assert "\\ud83d" in text and "é 😀" in text
    assert json.loads(data.decode("utf-8")) == value


def test_options_pass_through_and_plain_text_is_json_dumps_own():
    value = {"b": 1, "a": [1.5, None, "x"]}
    assert jsontext.dumps(value, indent=1, sort_keys=True) == json.dumps(value, indent=1, sort_keys=True)
    assert jsontext.dumps(object(), default=lambda o: "described") == '"described"'
