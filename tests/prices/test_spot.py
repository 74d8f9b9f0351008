"""A spot restart measured from a run: its largest load_s (model load + engine start) plus the
pull allowance; a run without one is a clear error."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import UserInputError
from harness.prices.spot import measured_load_s, restart_from_run
from harness.spec.tariffs import load_tariffs
from tests import factories as F
from tests.prices.recorded import RUNPOD_CSV, SNAPSHOT


def test_the_dearest_measured_load_is_the_restart() -> None:
    points = pd.DataFrame({"load_s": [7.0, None, 8.2, 0.0]})
    assert measured_load_s(points, "run") == 8.2  # the largest; missing and 0 left out
    with pytest.raises(UserInputError, match="no row of this run measured load_s"):
        measured_load_s(pd.DataFrame({"load_s": [None]}), "run")


def test_import_charges_spot_the_runs_measured_restart(tmp_path: Path) -> None:
    rows = [F.reference(load_s=7.0), F.row(load_s=8.2, **F.quality(100.01))]
    run = F.write_run(tmp_path / "run", rows)
    seconds, how = restart_from_run(run, pull_s=120.0)
    assert seconds == pytest.approx(8.2 + 120.0)
    assert "measured: load + engine start 8.2 s" in how
    out = tmp_path / "t.yaml"
    args = ["tariffs", "import", "gpuhunt-csv", str(RUNPOD_CSV), "--out", str(out), *SNAPSHOT]
    result = CliRunner().invoke(app, [*args, "--restart-from", str(run)])
    assert result.exit_code == 0, result.output
    spot = [t for t in load_tariffs(out).tariffs if t.basis == "spot"]
    assert spot and {t.restart_s for t in spot} == {8.2 + 300.0}  # the default pull: 300 s
    assert "measured: load + engine start 8.2 s" in (load_tariffs(out).note or "")
