"""Offline mode, device side: `run` (a group's offline points on one load of the engine)."""
