"""Long-context task families generated from a seed (RULER-style, written here from the
published task definitions): one file per family, one line in ``FAMILIES``. Each family's
``make(seed, context_tokens, depth, haystack, source, count)`` returns a ``base.LongItem``."""

from __future__ import annotations

from collections.abc import Callable

from harness.tasks.longctx import frequent_words, multi_key, single_needle, variable_tracking
from harness.tasks.longctx.base import LongItem

Maker = Callable[..., LongItem]
FAMILIES: dict[str, Maker] = {
    single_needle.NAME: single_needle.make,
    multi_key.NAME: multi_key.make,
    variable_tracking.NAME: variable_tracking.make,
    frequent_words.NAME: frequent_words.make,
}
