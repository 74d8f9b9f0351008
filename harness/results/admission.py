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

  - every mode, a reference claim: a row claiming ``is_reference`` is what the reference rule
    can make one (``harness.run.contracts.is_reference``): checkpoint weights, no adapter, not a
    training row; its paired changes against itself are 0 (ΔNLL, each task's drop).
  - every mode, quality: each interval the right way up (low ≤ high) and holding its own estimate
    (dnll_vs_ref within both ΔNLL intervals, the 90 % one inside the 95 % one: the same
    resamples; ppl within its CI); ppl = exp(nll_mean). A task part's own agreement (ARC-Easy's
    too: the task ``arc-easy``) is its schema's (``harness.row.tasks.TaskScore``: a row that
    breaks it is unreadable, named by field).

  - every mode, speculation (``speculation_problem``): a label that reads, a method the rules
    measure on the row's engine and target (``harness.spec.speculative.engine_rule``), and per
    workload acceptance figures that agree as a whole (rate in [0, 100] %, mean length in
    [1, k + 1], positions in [0, 100] % and never rising, the engine's counts giving rate and
    length); acceptance figures on a row without speculation are refused too.

  - each mode, its rows' own parts: its `check` part (``harness.modes``), whose rules its
    ``harness/modes/<mode>/admission.py`` states (serving: the request counts, rates and
    attainment; offline: the latencies, tokens and the throughput ceiling; training: the step's
    tokens and the point's columns).

  Exact identities are held to ``REL`` (relative) and counts to half a request.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness import modes
from harness.errors import UserInputError
from harness.row import SCHEMA_VERSION, ResultRow
from harness.run.store import MANIFEST, POINTS, point_path, read_row
from harness.spec import speculative
from harness.spec.scenario import Point

REL = 1e-6  # relative tolerance of an identity between two stored floats


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


def above(value: float, bound: float, rel: float = REL) -> bool:
    """`value` is above `bound`, beyond the tolerance of an identity between stored floats."""
    return value > bound + rel * abs(bound) + 1e-12


def apart(a: float, b: float, absolute: float) -> bool:
    """`a` and `b` differ by more than `absolute` and the relative tolerance."""
    return abs(a - b) > absolute + REL * max(abs(a), abs(b))


def mode_problem(row: ResultRow) -> str | None:
    """Why a row's mode's own parts disagree (its mode's `check` part: the module docstring's
    per-mode rules, stated in each mode's `admission.py`), None where they agree or the mode
    has no check."""
    mode = modes.get(row.mode)
    if mode.ref("check") is None:
        return None
    check: Callable[[ResultRow], str | None] = mode.load("check")
    return check(row)


def reference_claim_problem(row: ResultRow) -> str | None:
    """A row claiming ``is_reference`` that the reference rule could never make one, or whose
    paired changes against itself are not 0."""
    if not row.is_reference:
        return None
    if row.adapter is not None:
        return (
            f"is_reference with adapter {row.adapter[-40:]!r}: an adapter is compared with its "
            "base model, never the reference"
        )
    if row.weights != "checkpoint":
        return f"is_reference on {row.weights} weights: only checkpoint weights have a quality"
    never = modes.get(row.mode).facts.never_reference
    if never is not None:
        return f"is_reference on a {row.mode} row: {never}"
    changes = [("dnll_vs_ref", row.dnll_vs_ref)]
    changes += [(f"task {t.name[:40]}'s diff", t.diff) for t in row.tasks or []]
    for name, value in changes:
        if value is not None and apart(value, 0.0, 0.0):
            return f"is_reference with {name} {value:g}: the reference against itself is 0"
    return None


def _interval_problem(
    name: str, estimate: float | None, low: str, high: str, row: ResultRow
) -> str | None:
    """``low`` > ``high``, or ``estimate`` (named ``name``) outside [low, high]."""
    lo, hi = getattr(row, low), getattr(row, high)
    if lo is None or hi is None:
        return None
    if above(lo, hi):
        return f"{low} {lo:g} is above {high} {hi:g}"
    if estimate is not None and (above(lo, estimate) or above(estimate, hi)):
        return f"{name} {estimate:g} lies outside its own interval [{low} {lo:g}, {high} {hi:g}]"
    return None


def quality_problem(row: ResultRow) -> str | None:
    """The quality part against itself (the module docstring's list)."""
    found = (
        _interval_problem("dnll_vs_ref", row.dnll_vs_ref, "dnll_ci90_low", "dnll_ci90_high", row)
        or _interval_problem("dnll_vs_ref", row.dnll_vs_ref, "dnll_ci_low", "dnll_ci_high", row)
        or _interval_problem("ppl", row.ppl, "ppl_ci_low", "ppl_ci_high", row)
    )
    if found:
        return found
    lo90, hi90, lo95, hi95 = (
        row.dnll_ci90_low,
        row.dnll_ci90_high,
        row.dnll_ci_low,
        row.dnll_ci_high,
    )
    if (
        lo90 is not None
        and hi90 is not None
        and lo95 is not None
        and hi95 is not None
        and (above(lo95, lo90) or above(hi90, hi95))
    ):
        return (
            f"the ΔNLL 90 % interval [{lo90:g}, {hi90:g}] is not inside its 95 % one "
            f"[{lo95:g}, {hi95:g}] (both from the same resamples)"
        )
    if row.ppl is not None and row.nll_mean is not None:
        expected = math.exp(min(row.nll_mean, 700.0))
        if apart(row.ppl, expected, 0.0):
            return f"ppl {row.ppl:g} ≠ exp(nll_mean {row.nll_mean:g}) = {expected:g}"
    return None


# --- speculation ------------------------------------------------------------------------------

ACCEPTANCE_SLACK = 0.06  # percent: a per-position figure is stored to 0.1 %, so ±0.05 each
FIGURES = ("acceptance_rate_pct", "acceptance_length_tokens", "acceptance_per_pos_pct")


def speculation_problem(row: ResultRow) -> str | None:
    """Why a row's speculation contradicts itself (the module docstring), or None: a
    label that reads, a method the rules measure on the row's engine and target
    (speculative.engine_rule), and per workload acceptance figures that agree as a whole: the
    rate in [0, 100] %, the mean length in [1, k + 1] tokens, each position in [0, 100] % and
    never above the one before it, the engine's counts (accepted ≤ draft tokens ≤ drafts × k)
    giving the rate and the length, and the positions summing to length − 1."""
    if row.speculative is None:
        return _figures_without_speculation(row)
    match = speculative.LABEL_PATTERN.fullmatch(row.speculative)
    if match is None:
        return f"speculative {row.speculative[:60]!r} is not a configuration's label"
    method, k = match["method"], int(match["k"])
    engine = speculative.engine_rule(method, bool(match["synthetic"]), row.backend, row.target)
    if engine is not None:
        return f"speculative {row.speculative[:60]} on {row.backend}/{row.target}: {engine[1]}"
    return _acceptance_problem(row, "spec_", k) or _acceptance_problem(row, "spec_tasks_", k)


def _figures_without_speculation(row: ResultRow) -> str | None:
    for prefix in ("spec_", "spec_tasks_"):
        for name in FIGURES:
            if getattr(row, f"{prefix}{name}") is not None:
                return f"{prefix}{name} on a row measured without speculative decoding"
    return None


def _acceptance_problem(row: ResultRow, prefix: str, k: int) -> str | None:
    rate = getattr(row, f"{prefix}acceptance_rate_pct")
    length = getattr(row, f"{prefix}acceptance_length_tokens")
    text = getattr(row, f"{prefix}acceptance_per_pos_pct")
    if rate is not None and not 0.0 <= rate <= 100.0:
        return f"{prefix}acceptance_rate_pct {rate:g} is outside [0, 100] %"
    if length is not None and (length < 1.0 or above(length, k + 1.0)):
        return f"{prefix}acceptance_length_tokens {length:g} is outside [1, k + 1 = {k + 1}]"
    if rate is not None and length is not None and above(length - 1.0, k * rate / 100.0):
        return (
            f"{prefix}acceptance_length_tokens {length:g} needs more than k × rate = {k} × "
            f"{rate:g} % accepted per draft (+1 bonus): the two disagree"
        )
    return _per_position_problem(prefix, text, length, k) or _counts_problem(row, prefix, k)


def _per_position_problem(
    prefix: str, text: str | None, length: float | None, k: int
) -> str | None:
    if not text:
        return None
    name = f"{prefix}acceptance_per_pos_pct"
    try:
        positions = [float(p) for p in text.split(",")]
    except ValueError:
        return f"{name} {text[:40]!r} is not comma-separated percents"
    if len(positions) > k:
        return f"{name} has {len(positions)} positions; k = {k} draft tokens per step"
    if any(not 0.0 <= p <= 100.0 for p in positions):
        return f"{name} {text[:40]} has a position outside [0, 100] %"
    if any(b > a + ACCEPTANCE_SLACK for a, b in itertools.pairwise(positions)):
        return f"{name} {text[:40]} rises: a position is accepted only after the one before it"
    total = sum(positions) / 100.0
    slack = ACCEPTANCE_SLACK / 100.0 * len(positions)  # tokens: each position off by 0.05 %
    if length is not None and abs(total - (length - 1.0)) > slack:
        return (
            f"{name} sums to {total:.3g} accepted tokens per draft; the acceptance length "
            f"{length:g} says {length - 1.0:.3g}"
        )
    return None


def _counts_problem(row: ResultRow, prefix: str, k: int) -> str | None:
    """The engine's counts (the timed passes only: the tasks pass keeps its figures)."""
    drafts, proposed, kept = (
        getattr(row, f"{prefix}{name}", None)
        for name in ("drafts", "draft_tokens", "accepted_tokens")
    )
    if drafts is None or proposed is None or kept is None:
        return None
    if kept > proposed or proposed > drafts * k:
        return (
            f"{prefix}accepted_tokens {kept} ≤ {prefix}draft_tokens {proposed} ≤ "
            f"{prefix}drafts {drafts} × k {k} does not hold"
        )
    rate = getattr(row, f"{prefix}acceptance_rate_pct")
    if rate is not None and proposed and apart(rate, 100.0 * kept / proposed, 1e-9):
        return (
            f"{prefix}acceptance_rate_pct {rate:g} ≠ 100 × {kept} accepted / {proposed} draft "
            f"tokens = {100.0 * kept / proposed:g}"
        )
    length = getattr(row, f"{prefix}acceptance_length_tokens")
    if length is not None and drafts and apart(length, 1.0 + kept / drafts, 1e-9):
        return (
            f"{prefix}acceptance_length_tokens {length:g} ≠ 1 + {kept} accepted / {drafts} "
            f"drafts = {1.0 + kept / drafts:g}"
        )
    return None


def row_inconsistency(row: ResultRow) -> str | None:
    """Why a row's parts contradict each other (the rules above), or None."""
    return (
        reference_claim_problem(row)
        or quality_problem(row)
        or speculation_problem(row)
        or mode_problem(row)
    )


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


def reference_config(row: ResultRow) -> tuple[str, ...]:
    """What makes a row's configuration the reference's (``harness.run.contracts.is_reference``):
    backend, quantization, KV dtype, weights and adapter ("-": none)."""
    return (
        row.backend, row.quantization, row.kv_cache_dtype, row.weights, row.adapter or "-",
    )  # fmt: skip


def reference_problems(rows: Sequence[ResultRow]) -> dict[int, str]:
    """Rows (by position) claiming to be their model's reference in another configuration
    (``reference_config``) than most of the model's reference rows (ties: the first
    configuration in sorted order)."""
    configs: dict[tuple[str, str], Counter[tuple[str, ...]]] = {}
    for row in rows:
        if row.is_reference:
            configs.setdefault((row.model, row.revision), Counter())[reference_config(row)] += 1
    chosen = {
        model: min(counts, key=lambda c: (-counts[c], c)) for model, counts in configs.items()
    }
    out: dict[int, str] = {}
    for i, row in enumerate(rows):
        if not row.is_reference:
            continue
        config, want = reference_config(row), chosen[(row.model, row.revision)]
        if config != want:
            out[i] = (
                f"claims to be {row.model[:40]}'s reference as {_config(config)}; the run's "
                f"reference is {_config(want)}"
            )
    return out


def _config(config: tuple[str, ...]) -> str:
    """A reference configuration in words: backend/quantization/KV dtype, then weights and
    adapter where they are not the plain checkpoint."""
    backend, quantization, kv, weights, adapter = config
    extra = ("" if weights == "checkpoint" else f" on {weights} weights") + (
        "" if adapter == "-" else f" with adapter {adapter[-40:]}"
    )
    return f"{backend}/{quantization}/{kv}{extra}"


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
