"""Prices as data: GPU rental offers read from dated public price feeds, turned into tariff files.

One room for feeds. Data flows one way: a feed (``feeds/``: gpuhunt's live API, gpuhunt's catalog
CSV, SkyPilot's ``vms.csv``) → ``Offer`` rows (``offer``: one typed row every feed fills, with its
file and row) → filters and catalog card names (``cards``) → a ``TariffTable`` priced by package
rules (``rules``), written by ``build`` → read by ``harness aggregate`` / ``rent`` unchanged.

Beside it: a spot restart measured from a run (``spot``), the console's notes on stale, example
and spot prices (``stale``; each row's age and flag, and the cheapest offer and spread per card,
are ``harness.spec.tariffs``'s), and whether the cheapest configuration survives a change of feed
(``verdicts``, with the dated price history per card).
"""
