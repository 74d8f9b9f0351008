"""Which rows join a run: every admission rule in one place (``harness.results.frame.load_run``
calls ``admit``).

A row that ``harness.run.store`` reads (a ``ResultRow`` of finite, in-range figures) joins its run
only when it passes three checks; a row that fails one is unreadable, named with its cause, as a
non-finite value is, and never priced:

- **schema**: its ``schema_version`` is one this harness writes (1 … ``SCHEMA_VERSION``); a
  manifest claiming a newer one refuses the whole folder (one line naming the file and both
  versions). Never waived.
- **foreign** (the folder has a manifest; a folder without one is admitted as before, as nothing
  says what the run is): what the row records must be what the manifest's runs record: its
  ``provenance.corpus_hash`` one of their corpus hashes, its ``provenance.harness`` one of their
  harness versions, its ``group`` one of their groups (those they measured, the reference groups
  they added, the groups of the points they skipped: a row of another scenario has none of them),
  and, per model, one reference configuration (backend, quantization, KV dtype): a row claiming
  ``is_reference`` in another configuration than most of the model's reference rows is refused. A
  value a row does not record (a skipped row has no provenance) is no evidence either way.
  ``allow_mixed`` (``--allow-mixed``) admits these rows, and the aggregate states each one
  (``counts["mixed_rows"]``, and a line of the report's mixed note).
- **consistent** (``row_inconsistency``): the row's parts agree with each other.

  - serving: requests_ok + requests_failed = requests_sent; goodput_rps ≤ request_throughput;
    request_throughput × serving_duration_s = requests_ok; the attainment recomputable:
    slo_attainment × requests_sent requests met the SLO, at most requests_ok of them, and
    goodput_rps × serving_duration_s is that count; output_tok_s × serving_duration_s (the level's
    output tokens) at most ``OUTPUT_SLACK`` × the mean output length per successful request (the
    lengths are drawn round N(mean, sd): their mean is near the nominal one).
  - offline: ttft_ms_p50 ≤ e2e_ms_p50; generated_tokens ≤ batch × output_tokens; total_tok_s ≤
    batch × (context + output_tokens) ÷ e2e_ms_p50 (both are medians over the repeats: exact for an
    odd count, × ``EVEN_SLACK`` for an even one, where the median of a ratio is not the ratio of
    the medians); the decode ceiling is the roofline flag (``frame.flag_rows``: counted, never
    priced).
  - training: tokens_per_step = micro_batch × grad_accum × seq_len; micro_batch = batch and
    seq_len = context (the point's columns); train_tok_s = tokens_per_step ÷ step_s;
    trainable_params ≤ total_params.

  Exact identities are held to ``REL`` (relative) and counts to half a request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.errors import UserInputError
from harness.row import SCHEMA_VERSION, ResultRow
from harness.run.store import MANIFEST, POINTS, point_path, read_row
from harness.spec.scenario import Point

REL = 1e-6  # relative tolerance of an identity between two stored floats
HALF = 0.5  # a count recomputed from a rate × a duration: within half a request
# an even count of repeats: the median of (tokens ÷ e2e) is the mean of the two middle ratios,
# above tokens ÷ (median e2e) by (a + b)² / 4ab for middle e2e a, b: 10 leaves a / b up to 38
EVEN_SLACK = 10.0
OUTPUT_SLACK = 8.0  # output tokens per successful request, against the level's mean length


# --- the schema ------------------------------------------------------------------------------


def schema_problem(row: ResultRow) -> str | None:
    version = row.schema_version
    if 1 <= version <= SCHEMA_VERSION:
        return None
    return (
        f"result schema version {version}; this harness writes version {SCHEMA_VERSION} "
        "(read it with the harness that wrote it)"
    )


def check_manifest_schema(manifest: dict[str, Any], run_dir: Path) -> None:
    """A manifest (or one of its runs) claiming a newer result schema than this harness writes:
    UserInputError naming the file and both versions."""
    claims = [manifest.get("schema_version")]
    claims += [run.get("schema_version") for run in manifest.get("runs") or []]
    for claim in claims:
        if claim is None:
            continue
        if isinstance(claim, bool) or not isinstance(claim, int) or claim > SCHEMA_VERSION:
            raise UserInputError(
                f"the manifest claims result schema version {str(claim)[:40]!s}; this harness "
                f"writes version {SCHEMA_VERSION} (read it with the harness that wrote it)",
                file=str(Path(run_dir) / MANIFEST),
            )


# --- consistency of a row's parts ------------------------------------------------------------


def _above(value: float, bound: float, rel: float = REL) -> bool:
    return value > bound + rel * abs(bound) + 1e-12


def _apart(a: float, b: float, absolute: float) -> bool:
    return abs(a - b) > absolute + REL * max(abs(a), abs(b))


def serving_problem(row: ResultRow) -> str | None:
    sent, ok, failed = row.requests_sent, row.requests_ok, row.requests_failed
    duration, thr, good = row.serving_duration_s, row.request_throughput, row.goodput_rps
    if sent is not None and ok is not None and failed is not None and ok + failed != sent:
        return f"requests_ok {ok} + requests_failed {failed} ≠ requests_sent {sent}"
    if good is not None and thr is not None and _above(good, thr):
        return (
            f"goodput_rps {good:g} is above request_throughput {thr:g} (a request that meets "
            "the SLO is a successful one)"
        )
    duration = duration if duration is not None and duration > 0 else None  # timed, or not
    if (
        duration is not None
        and thr is not None
        and ok is not None
        and _apart(thr * duration, ok, HALF)
    ):
        return (
            f"request_throughput {thr:g} × serving_duration_s {duration:g} = "
            f"{thr * duration:g} requests, but requests_ok is {ok}"
        )
    attained = row.slo_attainment
    if attained is not None and sent is not None:
        met = attained * sent
        if sent == 0 and attained != 0:
            return f"slo_attainment {attained:g} with no request sent"
        if ok is not None and _above(met, ok + HALF / 10):
            return (
                f"slo_attainment {attained:g} of requests_sent {sent} = {met:g} requests met "
                f"the SLO, more than requests_ok {ok}"
            )
        if duration is not None and good is not None and _apart(good * duration, met, HALF):
            return (
                f"goodput_rps {good:g} × serving_duration_s {duration:g} = "
                f"{good * duration:g} requests met the SLO, but slo_attainment {attained:g} × "
                f"requests_sent {sent} = {met:g}"
            )
    tok_s = row.output_tok_s
    if tok_s is not None and duration is not None and ok is not None:
        tokens = tok_s * duration
        ceiling = ok * OUTPUT_SLACK * max(row.output_tokens, 1)
        if _above(tokens, ceiling):
            return (
                f"output_tok_s {tok_s:g} × serving_duration_s {duration:g} = {tokens:g} output "
                f"tokens from {ok} successful requests: above {ceiling:g} ({OUTPUT_SLACK:g} × the "
                f"mean output length {row.output_tokens} per request)"
            )
    return None


def offline_problem(row: ResultRow) -> str | None:
    ttft, e2e = row.ttft_ms_p50, row.e2e_ms_p50
    if ttft is not None and e2e is not None and _above(ttft, e2e):
        return f"ttft_ms_p50 {ttft:g} is above e2e_ms_p50 {e2e:g}"
    generated, most = row.generated_tokens, row.batch * row.output_tokens
    if generated is not None and generated > most:
        return (
            f"generated_tokens {generated} is above batch {row.batch} × output_tokens "
            f"{row.output_tokens} = {most}"
        )
    total = row.total_tok_s
    if total is not None and e2e is not None and e2e > 0:
        ceiling = row.batch * (row.context + row.output_tokens) / (e2e / 1e3)
        odd = row.repeats_done is not None and row.repeats_done % 2 == 1
        if _above(total, ceiling * (1.0 if odd else EVEN_SLACK)):
            return (
                f"total_tok_s {total:g} is above batch × (context + output_tokens) ÷ e2e_ms_p50 "
                f"= {ceiling:g} tok/s"
            )
    return None


def training_problem(row: ResultRow) -> str | None:
    micro, accum, seq, per_step = row.micro_batch, row.grad_accum, row.seq_len, row.tokens_per_step
    product = None if micro is None or accum is None or seq is None else micro * accum * seq
    if per_step is not None and product is not None and per_step != product:
        return (
            f"tokens_per_step {per_step} ≠ micro_batch {micro} × grad_accum {accum} × "
            f"seq_len {seq} = {product}"
        )
    if micro is not None and micro != row.batch:
        return f"micro_batch {micro} ≠ the point's batch {row.batch}"
    if seq is not None and seq != row.context:
        return f"seq_len {seq} ≠ the point's context {row.context}"
    step, tok_s = row.step_s, row.train_tok_s
    expected = per_step / step if per_step is not None and step is not None and step > 0 else None
    if tok_s is not None and expected is not None and _apart(tok_s, expected, 0.0):
        return (
            f"train_tok_s {tok_s:g} ≠ tokens_per_step {per_step} ÷ step_s {step:g} = {expected:g}"
        )
    trainable, total = row.trainable_params, row.total_params
    if trainable is not None and total is not None and trainable > total:
        return f"trainable_params {trainable} is above total_params {total}"
    return None


MODE_CHECKS = {"serving": serving_problem, "offline": offline_problem, "training": training_problem}


def row_inconsistency(row: ResultRow) -> str | None:
    """Why a row's parts contradict each other (its mode's rules above), or None."""
    return MODE_CHECKS[row.mode](row)


# --- foreign rows ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFacts:
    """What a run folder's manifest records of its runs (each set empty where none says)."""

    corpus_hashes: frozenset[str]
    harness_versions: frozenset[str]
    groups: frozenset[str]


def _strings(runs: Sequence[dict[str, Any]], name: str) -> frozenset[str]:
    return frozenset(str(r[name]) for r in runs if isinstance(r.get(name), str) and r[name])


def _skipped_groups(runs: Sequence[dict[str, Any]]) -> set[str]:
    labels: set[str] = set()
    for run in runs:
        for skip in run.get("skipped") or []:
            point = skip.get("point") if isinstance(skip, dict) else None
            try:
                labels.add(Point.model_validate(point).group.label)
            except (ValidationError, ValueError, TypeError):
                continue  # a skip the scenario model no longer reads: its group is not known
    return labels


def run_facts(manifest: dict[str, Any]) -> RunFacts | None:
    """The facts a row is held to, or None for a folder without a manifest's runs."""
    runs = [r for r in manifest.get("runs") or [] if isinstance(r, dict)]
    if not runs:
        return None
    groups: set[str] = set()
    for run in runs:
        for name in ("groups", "added_reference_groups"):
            value = run.get(name)
            if isinstance(value, list):
                groups.update(str(g) for g in value)
    if groups:
        groups |= _skipped_groups(runs)
    return RunFacts(
        corpus_hashes=_strings(runs, "corpus_hash"),
        harness_versions=_strings(runs, "harness"),
        groups=frozenset(groups),
    )


def _short(values: frozenset[str]) -> str:
    return ", ".join(sorted(v[:16] for v in values)[:4])


def foreign_problem(row: ResultRow, facts: RunFacts) -> str | None:
    """Why a row is not this run's (what it records against what the manifest records)."""
    corpus = row.provenance.corpus_hash
    if corpus and facts.corpus_hashes and corpus not in facts.corpus_hashes:
        return f"corpus hash {corpus[:16]} is not the run's ({_short(facts.corpus_hashes)})"
    version = row.provenance.harness
    if version and facts.harness_versions and version not in facts.harness_versions:
        return (
            f"measured by harness {version[:40]}; the run's manifest records "
            f"{_short(facts.harness_versions)}"
        )
    if row.group and facts.groups and row.group not in facts.groups:
        return f"group {row.group[:80]} is in none of the manifest's runs (another scenario)"
    return None


def reference_problems(rows: Sequence[ResultRow]) -> dict[int, str]:
    """Rows (by position) claiming to be their model's reference in another configuration than
    most of the model's reference rows (ties: the first configuration in sorted order)."""
    configs: dict[tuple[str, str], Counter[tuple[str, str, str]]] = {}
    for row in rows:
        if row.is_reference:
            config = (row.backend, row.quantization, row.kv_cache_dtype)
            configs.setdefault((row.model, row.revision), Counter())[config] += 1
    chosen = {
        model: min(counts, key=lambda c: (-counts[c], c)) for model, counts in configs.items()
    }
    out: dict[int, str] = {}
    for i, row in enumerate(rows):
        if not row.is_reference:
            continue
        config, want = (
            (row.backend, row.quantization, row.kv_cache_dtype),
            chosen[(row.model, row.revision)],
        )
        if config != want:
            out[i] = (
                f"claims to be {row.model[:40]}'s reference as {'/'.join(config)}; the run's "
                f"reference is {'/'.join(want)}"
            )
    return out


# --- admission -------------------------------------------------------------------------------


@dataclass
class Admitted:
    rows: list[ResultRow]
    unreadable: list[tuple[str, str]]  # (file, why): the store's and the refused rows
    mixed: list[tuple[str, str]] = field(default_factory=list)  # foreign, admitted (allow_mixed)


def _row_files(run_dir: Path, keys: set[str]) -> dict[str, Path]:
    """The file of each key (its own name, else the file that holds it: a row dropped in under
    another name); looked up only for the rows refused, so a clean run reads nothing twice."""
    found = {k: point_path(run_dir, k) for k in keys if point_path(run_dir, k).is_file()}
    missing = keys - found.keys()
    if missing:
        for path in sorted((Path(run_dir) / POINTS).glob("*.json")):
            got = read_row(path)
            if not isinstance(got, str) and got.key in missing:
                found[got.key] = path
                missing.discard(got.key)
    return found


def admit(
    run_dir: Path,
    rows: Sequence[ResultRow],
    unreadable: Sequence[tuple[str, str]],
    manifest: dict[str, Any],
    allow_mixed: bool = False,
) -> Admitted:
    """The rows that join the run, the unreadable files with why (the store's first, then the
    refused rows), and the foreign rows admitted because ``allow_mixed`` said so."""
    check_manifest_schema(manifest, run_dir)
    facts = run_facts(manifest)
    refused: dict[int, str] = {}
    foreign: dict[int, str] = {}
    for i, row in enumerate(rows):
        why = schema_problem(row) or row_inconsistency(row)
        if why:
            refused[i] = why
        elif facts is not None and (other := foreign_problem(row, facts)):
            foreign[i] = f"foreign row: {other}"
    if facts is not None:
        candidates = [i for i in range(len(rows)) if i not in refused and i not in foreign]
        claims = reference_problems([rows[i] for i in candidates])
        foreign.update({candidates[j]: f"foreign row: {why}" for j, why in claims.items()})
    if not allow_mixed:
        refused.update(foreign)
    files = _row_files(run_dir, {rows[i].key for i in (*refused, *foreign)})

    def named(i: int, why: str) -> tuple[str, str]:
        return str(files.get(rows[i].key, point_path(run_dir, rows[i].key))), why

    return Admitted(
        rows=[row for i, row in enumerate(rows) if i not in refused],
        unreadable=[*unreadable, *(named(i, why) for i, why in sorted(refused.items()))],
        mixed=[named(i, why) for i, why in sorted(foreign.items())] if allow_mixed else [],
    )
