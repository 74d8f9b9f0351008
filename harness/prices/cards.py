"""A feed's card name → the catalog's card, through the catalog's own names and aliases.

Feeds name cards loosely ("A100" with 40 or 80 GB, "H100", "RTX4090"): the name with its memory
("A100-40GB") is tried first, then the name alone. A card the catalog does not know is skipped
and counted, or, in strict mode, one error naming the file, row and field.
"""

from __future__ import annotations

from harness.errors import UserInputError, quote
from harness.prices.offer import feed_error
from harness.spec import catalog


def catalog_card(name: str, memory_gb: float | None = None) -> str | None:
    """The catalog name of a feed's card, or None when the catalog does not know it."""
    tries = [f"{name}-{round(memory_gb)}GB"] if memory_gb else []
    for candidate in (*tries, name):
        try:
            return catalog.gpu(candidate).name
        except UserInputError:
            continue
    return None


def known_card(
    name: str, memory_gb: float | None, strict: bool, where: tuple[str, int, str]
) -> str | None:
    """``catalog_card``; in strict mode an unknown card is an error at ``where`` (file, row,
    field) instead of None."""
    found = catalog_card(name, memory_gb)
    if found is None and strict:
        source, row, column = where
        raise feed_error(
            source,
            row,
            column,
            f"{quote(name)} is not a catalog card or alias "
            "(harness/spec/catalog/gpus.yaml); leave out --strict to skip and count it",
        )
    return found


def wanted_cards(names: list[str]) -> set[str]:
    """The catalog names of the --card filter (an unknown name: the catalog's own error)."""
    return {catalog.gpu(n).name for n in names}
