"""Shared helpers of the price-feed tests: the hand-written fixtures and the recorded gpuhunt
catalog (the layout gpuhunt reads from its bucket, on disk)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
RUNPOD_CSV = FIXTURES / "runpod.csv"
LAMBDA_VMS = FIXTURES / "skypilot" / "lambda" / "vms.csv"
LIVE_VERSION = "20261207-1"
SNAPSHOT = ["--feed-version", "20261207-3", "--observed-at", "2026-12-07T09:00:00Z"]


def recorded_catalog(base: Path, version: str = LIVE_VERSION) -> Path:
    """``base`` laid out as gpuhunt's catalog bucket: ``<provider>/version`` and
    ``<provider>/<version>/catalog.zip`` holding ``<provider>.csv`` for every offline provider
    (the recorded CSV where one is in fixtures/gpuhunt-live/, else the header alone)."""
    from gpuhunt._internal.catalog import OFFLINE_PROVIDERS

    header = RUNPOD_CSV.read_text().splitlines()[0] + "\n"
    for provider in OFFLINE_PROVIDERS:
        recorded = FIXTURES / "gpuhunt-live" / f"{provider}.csv"
        text = recorded.read_text() if recorded.exists() else header
        folder = base / provider / version
        folder.mkdir(parents=True)
        (base / provider / "version").write_text(version + "\n")
        with zipfile.ZipFile(folder / "catalog.zip", "w") as archive:
            archive.writestr(f"{provider}.csv", text)
    return base


def point_gpuhunt_at(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gpuhunt pointed (its own GPUHUNT_CATALOG_URL) at a recorded catalog on disk."""
    recorded_catalog(base)
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", base.as_uri())
    return base
