"""One site across runs (harness.results.site): runs from two "providers" side by side, each row
saying where it came from, each run judged against its own reference, incomparable runs refused
with nothing written, and an --out that is not a site never replaced."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import UserInputError
from harness.results.publish import FILES as REPORT_FILES
from harness.results.site import FILES, SITE_KIND, build_site
from harness.row import Provenance, ResultRow
from harness.spec.tariffs import TariffTable
from tests import factories as F

GPUS = ("H100-SXM-80GB", "RTX-4090")


def tariffs() -> TariffTable:
    return F.tariffs(*(F.tariff(gpu) for gpu in GPUS))


def provenance(host: str, device: str, corpus: str | None = "c0ffee") -> Provenance:
    return Provenance(
        hostname=host, device_name=device, harness="0.1.0", git_sha="abc123", corpus_hash=corpus
    )


def node_a() -> list[ResultRow]:
    return [
        r.model_copy(update={"provenance": provenance("node-a.first", "NVIDIA H100 80GB HBM3")})
        for r in F.small_grid()
    ]


def node_b(rows: list[ResultRow], **provenance_fields: str | None) -> list[ResultRow]:
    """The same points (same keys, same run name "run-a") measured at another provider: H100
    twice as fast, the RTX 4090 half as fast, every perplexity (the reference's too) 20 % higher."""
    out = []
    for r in rows:
        speed = 2.0 if r.gpu == "H100-SXM-80GB" else 0.5
        assert r.decode_tok_s is not None and r.ppl is not None
        fields = {
            "hostname": "node-b.second",
            "device_name": "Second Cloud H100",
            **provenance_fields,
        }
        out.append(
            r.model_copy(
                update={
                    "decode_tok_s": r.decode_tok_s * speed,
                    "ppl": r.ppl * 1.2,
                    "ppl_ci_low": r.ppl * 1.2 * 0.98,
                    "ppl_ci_high": r.ppl * 1.2 * 1.02,
                    "provenance": r.provenance.model_copy(update=fields),
                }
            )
        )
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("site")
    rows = node_a()
    return F.write_run(root / "node-a", rows), F.write_run(root / "node-b", node_b(rows))


@pytest.fixture(scope="module")
def site(two: tuple[Path, Path]) -> Path:
    out = two[0].parent / "site"
    build_site(list(two), out, tariffs(), utilisation=0.8)
    return out


def nothing_written(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_every_file_and_one_report_per_run(site: Path) -> None:
    assert sorted(p.name for p in site.iterdir()) == sorted([*FILES, "runs"])
    assert sorted(p.name for p in (site / "runs").iterdir()) == ["node-a", "node-b"]
    for run in ("node-a", "node-b"):
        assert sorted(p.name for p in (site / "runs" / run).iterdir()) == sorted(REPORT_FILES)
    assert not [p for p in site.parent.iterdir() if p.name.startswith(".site.")]
    assert json.loads((site / "site.json").read_text())["kind"] == SITE_KIND


def test_the_cheapest_across_runs_comes_from_the_run_that_measured_it_cheaper(site: Path) -> None:
    cheapest = pd.read_csv(site / "cheapest.csv")
    assert set(cheapest["gpu"]) == set(GPUS)
    by_gpu = cheapest.groupby("gpu")
    # node-b's H100 is twice as fast, its RTX 4090 half as fast: each GPU's winner says where
    assert set(by_gpu.get_group("H100-SXM-80GB")["run"]) == {"node-b"}
    assert set(by_gpu.get_group("H100-SXM-80GB")["provenance_hostname"]) == {"node-b.second"}
    assert set(by_gpu.get_group("RTX-4090")["run"]) == {"node-a"}
    assert set(by_gpu.get_group("RTX-4090")["provenance_device_name"]) == {"NVIDIA H100 80GB HBM3"}


def test_each_row_is_judged_against_its_own_runs_reference(site: Path) -> None:
    """Both runs' rows carry the run name "run-a" and the same keys; node-b's perplexities are
    all 20 % higher. A gate mixing the runs' references (median 110) would put node-b's bnb-int8
    below class 99 and node-a's bnb-nf4 in 99.9; per run, both keep their own classes."""
    points = pd.read_parquet(site / "points.parquet")
    assert set(points["run_name"]) == {"run-a"} and set(points["run"]) == {"node-a", "node-b"}
    assert points["key"].duplicated().sum() == len(points) // 2  # the same keys, never merged
    classes = points.groupby(["run", "quantization", "kv_cache_dtype"])["quality_class"]
    expected = {"none": "99.9", "bnb-int8": "99.9", "bnb-nf4": "99"}
    for (run, quant, _kv), got in classes:
        assert set(got.astype(str)) == {expected[quant]}, (run, quant)


def test_every_row_of_points_and_cost_says_where_it_came_from(site: Path) -> None:
    points = pd.read_csv(site / "points.csv")
    cost = pd.read_csv(site / "cost.csv")
    assert list(points.columns[:1]) == ["run"] and list(cost.columns[:1]) == ["run"]
    for table in (points, cost):
        for column in ("run", "run_folder", "provenance_hostname", "provenance_device_name",
                       "provenance_harness", "provenance_git_sha"):  # fmt: skip
            assert table[column].notna().all(), column
    pairs = set(zip(cost["run"], cost["provenance_hostname"], strict=True))
    assert pairs == {("node-a", "node-a.first"), ("node-b", "node-b.second")}
    assert len(cost) == 2 * 48 * 3  # two runs × 48 priced rows × 3 packages of their GPU


def test_the_index_links_only_to_pages_and_files_of_the_site(site: Path) -> None:
    page = (site / "index.html").read_text()
    links = re.findall(r'href="([^"]*)"', page)
    assert "runs/node-a/report.html" in links and "runs/node-b/report.html" in links
    assert "cost.csv" in links and "points.parquet" in links
    for link in links:
        assert "://" not in link and not link.startswith("/")
        assert (site / link).is_file(), link
    assert not re.search(r"\ssrc=|<link|@import|url\(", page)  # nothing fetched


def test_runs_with_another_corpus_hash_are_refused_and_nothing_is_written(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    third = F.write_run(
        tmp_path / "node-c", node_b(node_a(), hostname="node-c", corpus_hash="deadbeef")
    )
    out = tmp_path / "site"
    with pytest.raises(UserInputError) as caught:
        build_site([*two, third], out, tariffs())
    lines = str(caught.value).splitlines()
    assert lines[1:] == [
        f"corpus hash differs: run node-a ({two[0]}) has c0ffee, run node-c ({third}) has deadbeef"
    ]
    nothing_written(out)


def test_another_reference_is_one_line(two: tuple[Path, Path], tmp_path: Path) -> None:
    # a reference measured against itself: ΔNLL 0 (admission refuses a reference claim with any
    # other; harness.results.admission.reference_claim_problem)
    rows = [
        r.model_copy(
            update={"is_reference": True, **F.quality(r.ppl or 0.0, r.ppl or 0.0, half_ci=0.0002)}
            if reference
            else {"is_reference": False}
        )
        for r in node_a()
        for reference in [r.quantization == "bnb-int8" and r.kv_cache_dtype == "auto"]
    ]
    other = F.write_run(tmp_path / "node-d", rows)
    out = tmp_path / "site"
    with pytest.raises(UserInputError) as caught:
        build_site([two[0], other], out, tariffs())
    lines = str(caught.value).splitlines()[1:]
    assert lines == [
        f"reference configuration differs: run node-a ({two[0]}) has transformers none kv=auto, "
        f"run node-d ({other}) has transformers bnb-int8 kv=auto",
    ]
    nothing_written(out)


def test_rows_of_a_newer_result_schema_are_never_compared(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """Rows claiming a schema this harness does not write are unreadable (row admission), so a
    run of only such rows is refused before any comparison, naming the schema."""
    other = F.write_run(
        tmp_path / "node-d", [r.model_copy(update={"schema_version": 2}) for r in node_a()]
    )
    out = tmp_path / "site"
    with pytest.raises(UserInputError) as caught:
        build_site([two[0], other], out, tariffs())
    assert "node-d" in str(caught.value)
    nothing_written(out)


def test_allow_mixed_publishes_them_and_says_so_at_the_top(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    third = F.write_run(tmp_path / "node-c", node_b(node_a(), corpus_hash="deadbeef"))
    out = tmp_path / "site"
    built = build_site([*two, third], out, tariffs(), allow_mixed=True)
    assert len(built.mixed) == 1 and "corpus hash differs" in built.mixed[0]
    page = (out / "index.html").read_text()
    assert "<title>harness site (MIXED runs)</title>" in page
    banner = page.index('id="mixed"')
    assert banner < page.index("<h2>Runs</h2>")  # before any figure
    assert "corpus hash differs: run node-a" in page[banner:]
    assert json.loads((out / "site.json").read_text())["mixed"] == built.mixed


def test_the_same_folder_twice_is_refused_also_through_a_link(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    link = tmp_path / "again"
    link.symlink_to(two[0])
    out = tmp_path / "site"
    for pair in ([two[0], two[0]], [two[0], link]):
        with pytest.raises(UserInputError, match="the same run folder is given twice"):
            build_site(pair, out, tariffs())
        nothing_written(out)


def test_two_folders_with_one_name_are_both_published_under_distinct_names(
    tmp_path: Path,
) -> None:
    first = F.write_run(tmp_path / "provider-one" / "bench-cpu", node_a())
    second = F.write_run(tmp_path / "provider-two" / "bench-cpu", node_b(node_a()))
    built = build_site([first, second], tmp_path / "site", tariffs())
    labels = [r.label for r in built.runs]
    assert len(set(labels)) == 2 and all(label.startswith("bench-cpu-") for label in labels)
    for label in labels:
        assert (tmp_path / "site" / "runs" / label / "report.html").is_file()
    assert set(pd.read_csv(tmp_path / "site" / "points.csv")["run"]) == set(labels)


def test_an_out_that_is_a_run_or_not_a_site_is_never_replaced(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    for out in (two[0], two[0].parent):
        with pytest.raises(UserInputError, match="run folder"):
            build_site(list(two), out, tariffs())
    assert (two[0] / "points").is_dir()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(UserInputError, match="not a site"):
        build_site(list(two), mine, tariffs())
    assert (mine / "notes.txt").read_text() == "keep me"


def test_a_site_is_rebuilt_in_place(two: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site([two[0]], out, tariffs())
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["node-a"]
    build_site(list(two), out, tariffs())
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["node-a", "node-b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_a_script_in_a_model_name_or_hostname_is_escaped(tmp_path: Path) -> None:
    rows = [
        r.model_copy(update={"provenance": provenance(F.XSS_MODEL, "<img src=x onerror=alert(2)>")})
        for r in F.small_grid(model=F.XSS_MODEL)
    ]
    run = F.write_run(tmp_path / "x", rows)
    build_site([run], tmp_path / "site", tariffs())
    page = (tmp_path / "site" / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<script>alert" not in page and "<img" not in page
    assert page.count("<script>") == 1  # the table sorting, the report's own
