"""What `orsgen eval --resume` reads back of its records: a record whose text holds a line separator Python's
`splitlines()` breaks at (U+2028, U+2029, U+0085) is one record, not two cut lines run again."""

from orsgen import evaluate
from orsgen.runtime import jsontext


def test_a_record_holding_unicode_line_separators_reads_back_whole(tmp_path):
    records = [{"task_index": 0, "completion": [{"role": "assistant", "content": "one\u2028two\u2029three\x85"}]},
               {"task_index": 1, "completion": []}]
    (tmp_path / evaluate.RECORDS).write_text("".join(jsontext.dumps(r) + "\n" for r in records) + '{"cut', "utf-8")
    assert evaluate.records_of(tmp_path) == records  # the last line, cut by a killed run, is left out


def test_replay_reads_such_a_record_as_one_episode(tmp_path):
    from orsgen import replay
    from orsgen.runtime import trajectories

    record = {"schema": trajectories.SCHEMA, "task_index": 0, "completion": "one\u2028two"}
    (tmp_path / "trajectories.jsonl").write_text(jsontext.dumps(record) + "\n", "utf-8")
    (episode,) = replay.read([tmp_path])
    assert (episode.record, episode.status) == (record, "equal")
