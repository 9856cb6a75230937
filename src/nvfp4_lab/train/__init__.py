"""The Lightning wiring of a run: the task, the module, its backend, progress and the W&B
logger (docs/architecture.md, train/)."""
