"""orsgen: generate typed, pinned Python adapters for Open Reward Standard environments.

Two parts that install apart. The generator: `pipeline.run(job, mode)` joins its stages, `source` (fetch) ->
`snapshot` -> `model` (one node per schema construct, `model.typemap`) -> `render` -> `write` or `check`; `cli`
only parses arguments into `config.Job`s. The runtime (`orsgen.runtime`) is what generated modules import when they
train; it never imports the generator.
"""

__version__ = "0.2.0"
