"""Tasks: the protocol (base), the vocabulary a task declares itself in (spec, ledger), one package per
task. The registry that names them is engine.core.registry, below the config that reads it."""
