"""orsgen: generate typed, pinned Python adapters for Open Reward Standard environments."""

__version__ = "0.2.0"
