"""How old each price is: the console's notes under a priced table (the tariff lines of the
report and the site say it through ``TariffTable.read_label``).

A price older than the tariff file's ``stale_after_days`` (default 7) is STALE; a tariff marked
``example`` is an EXAMPLE, not a quote. The per-row figures (``price_age_days``, ``price_stale``,
``price_read``) are on every cost row (``harness.spec.tariffs.TariffTable.package_rows``).
"""

from __future__ import annotations

import datetime as dt

from harness.spec.tariffs import TariffTable, utc_today


def price_notes(table: TariffTable, today: dt.date | None = None) -> list[str]:
    """The console's lines under a priced table: stale prices and example prices, counted."""
    day = today or utc_today()
    total = len(table.tariffs)
    stale = [t for t in table.tariffs if t.age_days(day) > table.stale_after_days]
    examples = sum(t.example for t in table.tariffs)
    lines = []
    if stale:
        oldest = max(stale, key=lambda t: t.age_days(day))
        lines.append(
            f"STALE prices: {len(stale)} of {total} tariffs were read more than "
            f"{table.stale_after_days} days ago (oldest: {oldest.label}, "
            f"{oldest.age_days(day)} days); re-import before you rent"
        )
    if examples:
        lines.append(f"EXAMPLE prices: {examples} of {total} tariffs are examples, not quotes")
    lines += spot_lines(table)
    return lines


def spot_lines(table: TariffTable) -> list[str]:
    """Each spot tariff's interruption risk and the restart charge its prices include."""
    return [
        f"SPOT {t.label} {t.region}: interruptible, {t.interruptions_per_day:g} interruption(s) "
        f"a day × {t.restart_s:g} s restart (pull + load + engine start) at ${t.hourly_usd:g}/h "
        f"= ${t.spot_restart_usd_per_hour():.4g}/h, included in its package prices"
        for t in table.tariffs
        if t.basis == "spot"
    ]
