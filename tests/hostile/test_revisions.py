"""A model is its id and its revision, everywhere: two revisions of one id plan from their own
config.json under their own labels and keys; a revision the cache lacks, offline, is refused
naming that revision; a model cached only at a revision other than main plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import UserInputError
from harness.spec import scenario as scen
from harness.spec.labels import PLAN_LABEL, configuration_label
from tests.hfcache import add_snapshot, hf_cache, tiny_files

__all__ = ["hf_cache"]

HUB_ID = "harness-test/tiny-llama"
BIG = "1111111111111111111111111111111111111111"
SMALL = "2222222222222222222222222222222222222222"


def scenario(tmp_path: Path, *refs: str) -> Path:
    path = tmp_path / "revs.yaml"
    models = ", ".join("{id: " + HUB_ID + ", revision: " + r + ", weights: random}" for r in refs)
    path.write_text(
        f"name: revs\nmodels: [{models}]\nbackend: [transformers]\nquantization: [none]\n"
        "batch: [1]\ncontext: [16]\noutput_tokens: 4\ntargets: [cpu]\n"
    )
    return path


def two_revisions(cache: Path) -> None:
    add_snapshot(cache, HUB_ID, tiny_files(hidden_size=1024, intermediate_size=4096),
                 commit=BIG, revision="big")  # fmt: skip
    add_snapshot(cache, HUB_ID, tiny_files(), commit=SMALL, revision="small")


def test_two_revisions_plan_from_their_own_configs_under_their_own_labels(
    hf_cache: Path, tmp_path: Path
) -> None:
    two_revisions(hf_cache)
    result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path, "big", "small")), "--json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["points"]
    by_model = {p["model"]: p["weights_gib"] for p in points}
    assert set(by_model) == {f"{HUB_ID}@big", f"{HUB_ID}@small"}
    assert by_model[f"{HUB_ID}@big"] > 4 * by_model[f"{HUB_ID}@small"]  # 4x the hidden size

    grid = scen.expand(scen.load(scenario(tmp_path, "big", "small")))
    labels = {configuration_label(p.model_dump(), PLAN_LABEL) for p in grid.points}
    assert len(labels) == 2 and len({p.group.label for p in grid.points}) == 2
    assert len({p.key("c") for p in grid.points}) == 2


def test_an_uncached_revision_offline_is_refused_naming_it(hf_cache: Path, tmp_path: Path) -> None:
    two_revisions(hf_cache)
    result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path, "v9.9"))])
    assert result.exit_code == 2, result.output
    assert "'v9.9'" in result.output and "Traceback" not in result.output
    assert "'main'" not in result.output


def test_a_model_cached_only_at_another_revision_plans(hf_cache: Path, tmp_path: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files(), commit=SMALL, revision="small")
    result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path, "small"))])
    assert result.exit_code == 0, result.output


def test_main_stays_the_bare_id(hf_cache: Path, tmp_path: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files())
    grid = scen.expand(scen.load(scenario(tmp_path, "main")))
    assert {configuration_label(p.model_dump(), ("model",)) for p in grid.points} == {HUB_ID}


def test_a_catalog_id_at_another_revision_reads_that_revisions_config(
    hf_cache: Path, tmp_path: Path
) -> None:
    """The catalog's facts are main's: another revision of a catalog id is not planned with them."""
    path = tmp_path / "cat.yaml"
    path.write_text(
        "name: cat\nmodels: [{id: meta-llama/Llama-3.1-8B-Instruct, revision: old, weights: "
        "random}]\nbackend: [transformers]\nquantization: [none]\nbatch: [1]\ncontext: [16]\n"
        "output_tokens: 4\ntargets: [cpu]\n"
    )
    with pytest.raises(UserInputError, match="'old'"):
        scen.load(path)
