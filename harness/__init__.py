"""harness: cheapest tokens at equal quality, per GPU rental package."""

__version__ = "0.1.0"
