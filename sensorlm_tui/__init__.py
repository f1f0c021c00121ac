"""What your code imports from sensorlm-tui: the names here stay put while the engine's insides move.

- ``sensorlm_tui.loop``: ``cockpit``, ``Run``, ``StopRun``, ``CockpitError``, a loop of your own in the cockpit;
- ``sensorlm_tui.lightning``: ``CockpitCallback`` for a Lightning ``Trainer``;
- ``sensorlm_tui.hf``: ``CockpitCallback`` for a ``transformers.Trainer``;
- ``sensorlm_tui.plugin``: ``Task``, ``TaskSpec``, ``Capabilities``, ``Metric``, ``Setting``, ``Section``,
  what a task plugin is written in (its entry points go in the ``sensorlm_tui.tasks`` group);
- ``sensorlm_tui.lm``: the base model an adapter of an ``lm`` run was trained on;
- ``sensorlm_tui.steps``: ``read_steps``, a run's step record as columns for pandas / polars (docs/STEP_RECORD.md).

Each module only re-exports names defined in ``engine`` (this package sits above it; the engine never imports
it). Importing this package imports nothing else: Lightning, transformers and torch come with the module
that needs them. docs/INTEGRATIONS.md and examples/ use only these names.
"""
