"""The judged environment (tests/envs/judged.py) with a tool whose code raises: the SDK then ends that rollout's
session, while its group is still scored on another (tests/test_runtime_odd_configurations.py)."""

from openreward.environments import ToolOutput, tool

from tests.envs.judged import Judged


class JudgedCrash(Judged):
    @tool
    def crash(self) -> ToolOutput:
        """A tool whose code raises."""
        raise RuntimeError("the tool's code broke")

    @classmethod
    def name(cls) -> str:
        return "JudgedCrash"
