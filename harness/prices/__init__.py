"""Prices as data: GPU rental offers read from dated public price feeds, turned into tariff files.

One room for feeds. Data flows one way: a feed (``feeds/``: gpuhunt's live API, gpuhunt's catalog
CSV, SkyPilot's ``vms.csv``) → ``Offer`` rows (``offer``: one typed row every feed fills, with its
file and row) → filters and catalog card names (``cards``) → a ``TariffTable`` priced by package
rules (``rules``), written by ``build`` → read by ``harness aggregate`` / ``rent`` unchanged.

Beside it: each price's age and the stale flag (``stale``), the cheapest offer and the spread per
card (``spread``), and whether the cheapest configuration survives a change of feed (``verdicts``,
with the dated price history per card).
"""
