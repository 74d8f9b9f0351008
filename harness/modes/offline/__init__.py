"""Offline mode: a fixed batch through the engine in process, every (batch, context) point of
a group on one load: speed per phase, memory per phase against the plan, quality once per group.
Its device runner is `device/run.py`; its rows are the core's points table (gate, cost, Pareto)."""
