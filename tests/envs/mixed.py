"""Episodes that end every way, for tests/test_async_group_counts.py: task 1's sessions never start (setup raises),
`score` gives 1.0, `crash` raises (the SDK then ends the session)."""

from openreward.environments import Environment, TextBlock, ToolOutput, tool


class Mixed(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i} for i in range(3)]

    def setup(self) -> None:
        if self.task_spec["n"] == 1:
            raise RuntimeError("task 1 never starts")

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"mixed task {self.task_spec['n']}")]

    @tool
    def score(self) -> ToolOutput:
        """Score the episode: 1.0."""
        return ToolOutput(blocks=[TextBlock(text="scored")], reward=1.0)

    @tool
    def crash(self) -> ToolOutput:
        """A tool whose code raises."""
        raise RuntimeError("the tool's code broke")
