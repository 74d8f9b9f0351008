"""The transformers engine's options (the scenario's ``engines: {transformers: {...}}``): none
yet; the model, its dtype and its quantization come from the point."""

from __future__ import annotations

from harness.spec.yamlinput import Input


class TransformersOptions(Input):
    """Nothing to set: an empty block is accepted, any key is an error."""

    @property
    def gpu_share(self) -> float | None:
        """It takes no share of a card up front."""
        return None
