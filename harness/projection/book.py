"""A fitted ledger and the band it lends a projection, or why it lends none.

A **book** is one ledger's data (the shipped extracts, or your own runs), kept apart from every
other: its cells (``ledger.cells``: a band per phase, dense or MoE, and direction, each checked
by leaving a card out) and its **scope**, the range of the data it was fitted on (regime, phase,
engine family, weight and KV format, dense or MoE, load, input and output tokens). A projection
(source → target) gets a band from a book only when

1. it lies inside the book's scope (else it is flagged: ``outside … data: …``, no band);
2. both cards were measured in the book with the projection's engine family (its stack);
3. its cell is validated (held-out coverage within ``ledger.TOLERANCE_POINTS`` of the stated).

Else the answer is ``NO_BAND``: no band is borrowed from another card, class or ledger. The band
carries the cell's median ratio: the projection is re-centred on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict

from harness.projection import ledger
from harness.projection.external import read_external
from harness.spec import catalog

NO_BAND = "no validated band: measure it"
SIXTEEN_BIT = "16-bit"
# weight and KV formats that are the model's own 16-bit dtype, however a source spells it
SIXTEEN_BIT_NAMES = frozenset({"none", "auto", "fp16", "bf16", "float16", "bfloat16", "half"})
# the scenario of a static batch (sequences decoded together), as the external CSV names it;
# offline (saturated) and server figures are other scenarios, never pooled with it
STATIC = "static"
EXTERNAL = Path(__file__).resolve().parents[1] / "data/external"
# The shipped ledgers: name → (external CSV under EXTERNAL, regime of its data). Each is its own
# book, fitted apart; a band is chosen by scope, never by pooling them.
SHIPPED_LEDGERS = {
    "shipped Argonne": ("argonne/results.csv", STATIC),
}


def weight_format(name: str) -> str:
    return SIXTEEN_BIT if name.lower() in SIXTEEN_BIT_NAMES else name.lower()


def engine_family(name: str) -> str:
    """The engine's family: its name without a version, lower case, `_` as `-`."""
    return name.split()[0].split("==")[0].lower().replace("_", "-") if name.strip() else name


class Band(BaseModel):
    """measured ÷ projected between low and high, its median the re-centring ratio; ``source``
    says where it was read, ``held_out`` the held-out check that validates it."""

    model_config = ConfigDict(frozen=True)
    low: float
    median: float
    high: float
    source: str


class Query(BaseModel):
    """What a projection is: the range a book must cover to lend it a band."""

    model_config = ConfigDict(frozen=True)
    phase: str
    source: str
    target: str
    engine: str
    weights: str
    kv_cache_dtype: str = "auto"
    arch: str = "dense"
    load: int
    input_tokens: int
    output_tokens: int
    regime: str = STATIC


class Scope(BaseModel):
    """The range of one phase's data in a book."""

    model_config = ConfigDict(frozen=True)
    regime: str
    engines: tuple[str, ...]
    weights: tuple[str, ...]
    kv_caches: tuple[str, ...]
    archs: tuple[str, ...]
    load: tuple[int, int]
    input_tokens: tuple[int, int]
    output_tokens: tuple[int, int]

    def outside(self, q: Query) -> str:
        """Why the query lies outside this range, or ''."""
        checks = [
            (q.regime == self.regime, f"scenario {q.regime} (its data: {self.regime})"),
            (engine_family(q.engine) in self.engines,
             f"engine {q.engine} (its data: {', '.join(self.engines)})"),
            (weight_format(q.weights) in self.weights,
             f"weights {q.weights} (its data: {', '.join(self.weights)})"),
            (weight_format(q.kv_cache_dtype) in self.kv_caches,
             f"KV cache {q.kv_cache_dtype} (its data: {', '.join(self.kv_caches)})"),
            (q.arch in self.archs, f"{q.arch} model (its data: {', '.join(self.archs)})"),
            (_within(q.load, self.load), f"load {q.load} (its data: {_span(self.load)})"),
            (_within(q.input_tokens, self.input_tokens),
             f"{q.input_tokens} input tokens (its data: {_span(self.input_tokens)})"),
            (_within(q.output_tokens, self.output_tokens),
             f"{q.output_tokens} output tokens (its data: {_span(self.output_tokens)})"),
        ]  # fmt: skip
        return "; ".join(why for ok, why in checks if not ok)

    def text(self) -> str:
        return (
            f"scenario {self.regime}, engines {', '.join(self.engines)}, weights "
            f"{', '.join(self.weights)}, KV {', '.join(self.kv_caches)}, "
            f"{' and '.join(self.archs)}, load "
            f"{_span(self.load)}, input {_span(self.input_tokens)} and output "
            f"{_span(self.output_tokens)} tokens"
        )


def _within(value: int, span: tuple[int, int]) -> bool:
    return span[0] <= value <= span[1]


def _span(span: tuple[int, int]) -> str:
    return str(span[0]) if span[0] == span[1] else f"{span[0]}–{span[1]}"


def scope_of(measured: Sequence[ledger.Measured], regime: str) -> Scope:
    """The range of the figures (one phase's) that entered a pair."""
    return Scope(
        regime=regime,
        engines=tuple(sorted({engine_family(m.key[0]) for m in measured})),
        weights=tuple(sorted({weight_format(m.key[2]) for m in measured})),
        kv_caches=tuple(sorted({weight_format(m.kv_cache) for m in measured})),
        archs=tuple(sorted({m.arch for m in measured})),
        load=(min(m.key[4] for m in measured), max(m.key[4] for m in measured)),
        input_tokens=(min(m.key[5] for m in measured), max(m.key[5] for m in measured)),
        output_tokens=(min(m.key[6] for m in measured), max(m.key[6] for m in measured)),
    )


class Book(BaseModel):
    """One ledger fitted: its scope per phase and its cells."""

    model_config = ConfigDict(frozen=True)
    name: str
    scopes: dict[str, Scope]
    cells: dict[tuple[str, str, str], ledger.Cell]

    def scope_text(self) -> str:
        """The range of its data per phase: what a projection must lie in to get a band."""
        return "; ".join(f"{phase}: {scope.text()}" for phase, scope in self.scopes.items())

    def band(self, q: Query) -> Band | str:
        """The band this book lends the query, or why it lends none (``outside``: flagged)."""
        scope = self.scopes.get(q.phase)
        if scope is None:
            return f"{NO_BAND} ({self.name} has no {q.phase} pairs)"
        outside = scope.outside(q)
        if outside:
            return f"outside {self.name}'s data: {outside}"
        engine = engine_family(q.engine)
        stacks = {(card, engine_family(stack)) for c in self.cells.values() if c.phase == q.phase
                  for card, stack in c.stacks}  # fmt: skip
        absent = [c for c in (q.source, q.target) if (c, engine) not in stacks]
        if absent:
            return f"{NO_BAND} (no {' or '.join(absent)} with {engine} in {self.name})"
        way = ledger.direction(q.source, q.target)
        cell = self.cells.get((q.phase, q.arch, way))
        if cell is None:
            return f"{NO_BAND} (no {way} {q.arch} pairs in {self.name})"
        if not cell.validated or cell.low is None or cell.high is None or cell.median is None:
            return f"{NO_BAND} ({held_out_text(cell, q.target)} in {self.name})"
        return Band(
            low=cell.low, median=cell.median, high=cell.high,
            source=f"{self.name}: {way}, {q.arch}, {cell.pairs} pairs; "
            f"{held_out_text(cell, q.target)}",
        )  # fmt: skip


def pair_band(book: Book, pair: ledger.PairError, scenario: str = STATIC) -> Band | str:
    """The band the book lends a pair of measurements made elsewhere (a held-out CSV scored by
    `harness ledger check`): the query its key describes."""
    engine, _, weights, _, load, inputs, outputs = pair.key
    return book.band(
        Query(
            phase=pair.phase, source=pair.source, target=pair.target, engine=engine,
            weights=weights, arch=pair.arch, load=load, input_tokens=inputs,
            output_tokens=outputs, regime=scenario,
        )
    )  # fmt: skip


def held_out_text(cell: ledger.Cell, card: str) -> str:
    """The cell's leave-a-card-out coverage, and the card's own where it was held out."""
    stated = float(ledger.STATED_COVERAGE * 100)
    if cell.low is None:
        return f"{cell.direction}: too few keys to state a band ({cell.keys})"
    whole = _pct(cell.held_out_coverage_pct)
    text = f"held out a card at a time, {whole} inside (stated {stated:.0f} %)"
    mine = cell.card_coverage_pct.get(card)
    return text if card not in cell.card_coverage_pct else f"{text}, {_pct(mine)} on {card}"


def _pct(value: float | None) -> str:
    return "none banded" if value is None else f"{value:.1f} %"


def fit(name: str, measured: Iterable[ledger.Measured], regime: str = STATIC) -> Book:
    """A book from its figures: the cells of every pair, the scope of the figures in a pair."""
    figures = list(measured)
    errors = ledger.leave_one_card_out(figures)
    paired = {(e.phase, e.key, c) for e in errors for c in (e.source, e.target)}
    scopes = {}
    for phase in ledger.PHASES:
        mine = [m for m in figures if m.phase == phase and (phase, m.key, m.card) in paired]
        if mine:
            scopes[phase] = scope_of(mine, regime)
    return Book(name=name, scopes=scopes, cells=ledger.cells(errors))


def lend(books: Sequence[Book], q: Query) -> Band | str:
    """The first book's band for the query, or every book's reason (joined) when none lends."""
    if q.source == q.target:
        raise ValueError("a card is not projected onto itself")
    reasons = []
    for book in books:
        got = book.band(q)
        if isinstance(got, Band):
            return got
        reasons.append(got)
    return "; ".join(reasons) if reasons else f"{NO_BAND} (no ledger)"


# --- the books: shipped, and your runs ------------------------------------------------------


class Shipped(BaseModel):
    """One shipped ledger's data: its figures and their sources (repository@commit)."""

    model_config = ConfigDict(frozen=True)
    name: str
    regime: str
    measured: list[ledger.Measured]
    source: str


@cache
def shipped_data() -> tuple[Shipped, ...]:
    """The shipped ledgers' figures (``SHIPPED_LEDGERS``), in their order."""
    out = []
    for name, (path, regime) in SHIPPED_LEDGERS.items():
        rows = read_external(EXTERNAL / path).rows
        source = "; ".join(sorted({row.source.split(" ")[0] for row in rows}))
        out.append(Shipped(name=name, regime=regime, measured=ledger.observations(rows),
                           source=source))  # fmt: skip
    return tuple(out)


@cache
def shipped_books() -> tuple[Book, ...]:
    """The shipped ledgers fitted, each apart, in their order."""
    return tuple(fit(x.name, x.measured, x.regime) for x in shipped_data())


def own_measured(points: pd.DataFrame) -> list[ledger.Measured]:
    """Your GPU rows' decode and prefill figures as the ledger reads them (the key: engine,
    model and its KV dtype, weights, one card, batch, context, output tokens)."""
    measured: list[ledger.Measured] = []
    for r in points.to_dict(orient="records"):
        if catalog.gpu(str(r["gpu"])).vendor == "cpu":
            continue
        key: ledger.Key = (
            str(r["backend"]), f"{r['model']}|kv={r['kv_cache_dtype']}", str(r["quantization"]),
            1, int(r["batch"]), int(r["context"]), int(r["output_tokens"]),
        )  # fmt: skip
        for phase, column in (("decode", "decode_tok_s"), ("prefill", "prefill_tok_s")):
            value = r.get(column)
            if value is not None and value == value and value > 0:
                one = ledger.Measured(
                    phase=phase, key=key, card=str(r["gpu"]), tok_s=float(value),
                    roofline_tok_s=None, arch=ledger.arch_of(str(r["model"])),
                    kv_cache=weight_format(str(r["kv_cache_dtype"])),
                )  # fmt: skip
                measured.append(one)
    return measured


def books_for(rows: pd.DataFrame) -> tuple[Book, ...]:
    """Your runs' book (the passing rows ``candidates`` keeps), then the shipped ones."""
    return (fit("your runs", own_measured(rows)), *shipped_books())
