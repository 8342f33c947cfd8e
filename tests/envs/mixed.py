"""Episodes that end every way, for tests/test_async_group_counts.py: the brittle environment (`score` gives 1.0,
`crash` raises and the SDK ends the session) whose task 1 never starts (setup raises)."""

from tests.envs.brittle import Brittle


class Mixed(Brittle):
    def setup(self) -> None:
        if self.task_spec["n"] == 1:
            raise RuntimeError("task 1 never starts")
