"""The report's training section (mode: training rows): $ per 1M training tokens per package, the
cost to the target held-out loss per method, the gate against the full fine-tune, and every
training row's memory per phase next to the plan. Empty when the run has no training rows.
The mode's `report` part is ``REPORT`` (the contract: harness.modes.base.ReportPart)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import pandas as pd

from harness.modes.base import Column, HtmlTable, MdTable
from harness.modes.training import price as trn
from harness.results.aggregate import Aggregate
from harness.results.columns import headers, table_columns
from harness.results.publish.format import fmt_value

COST_HEADERS: dict[str, str] = headers(
    (
        "model",
        "train_method",
        "micro_batch",
        "grad_accum",
        "seq_len",
        "gpu",
        "provider",
        "package_days",
        "train_tok_s",
        "usd_per_mtok_train",
        "j_per_mtok_train",
        "target_eval_loss",
        "steps_to_target",
        "usd_to_target",
    )
)
ROW_HEADERS: dict[str, str] = headers(
    (
        "train_method",
        "micro_batch",
        "grad_accum",
        "seq_len",
        "optimizer",
        "trainable_params",
        "train_peak_mib_forward",
        "predicted_train_mib_forward",
        "train_peak_mib_backward",
        "predicted_train_mib_backward",
        "train_peak_mib_optimizer",
        "predicted_train_mib_optimizer",
        "step_s",
        "train_tok_s",
        "loss_first",
        "loss_last",
        "grad_norm_last",
        "eval_loss",
        "eval_loss_ci_low",
        "eval_loss_ci_high",
        "dloss_vs_full",
        "dloss_vs_full_ci_high",
        "train_pass_99",
        "status",
    )
)


def records(frame: pd.DataFrame, headers: dict[str, str]) -> list[dict[str, str]]:
    present = {k: v for k, v in headers.items() if k in frame.columns}
    return [
        {label: fmt_value(rec.get(name)) for name, label in present.items()}
        for rec in frame.astype("object").to_dict(orient="records")
    ]


def md_table(rows: Sequence[dict[str, str]]) -> str:
    if not rows:
        return "(no rows)\n"
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r[h].replace("|", "\\|") for h in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"


NOTE = (
    "Each row: one fine-tuning configuration, `steps` optimizer steps on the train block, held-out "
    "loss (nats/token) on the eval block with a 95 % bootstrap CI over eval windows. $ per 1M "
    "training tokens = the package's hourly cost ÷ (train tok/s × 3600) × 10⁶; $ to target = "
    "steps to the target held-out loss × step time × hourly cost. Δ vs full: paired over the same "
    "eval windows against the full fine-tune of the same shape; pass 99: its CI's upper bound "
    "≤ −ln 0.99. Memory per phase on the last step (CPU: process RSS) next to the plan."
)


LEAKAGE_HEADERS: dict[str, str] = headers(("seen", "eval", "n", "shared", "eval_ngrams", "overlap"))
LEAKAGE_NOTE = (
    "Distinct word n-grams of each scored text that also occur in a text a model or quantizer "
    "saw (13-grams, as contamination studies count them); from the run's manifest."
)


def leakage_markdown(result: Aggregate) -> list[str]:
    if not result.leakage:
        return []
    frame = pd.DataFrame(result.leakage)
    return ["\n## Leakage: n-gram overlap\n", LEAKAGE_NOTE + "\n",
            md_table(records(frame, LEAKAGE_HEADERS))]  # fmt: skip


def leakage_html(result: Aggregate, html_table: HtmlTable) -> list[str]:
    if not result.leakage:
        return []
    return [
        '<h2 id="leakage">Leakage: n-gram overlap</h2>',
        f'<p class="note">{escape(LEAKAGE_NOTE)}</p>',
        html_table(pd.DataFrame(result.leakage), table_columns(LEAKAGE_HEADERS), "leakage"),
    ]


ACCUMULATION_HEADERS: dict[str, str] = headers(
    (
        "model",
        "train_method",
        "split_a",
        "split_b",
        "tokens_per_step",
        "max_abs_dloss_curve",
        "abs_deval_loss",
        "tolerance",
        "equivalent",
    )
)
ACCUMULATION_NOTE = (
    "Rows that split the same windows per step differently (micro-batch × accumulation) must "
    "train alike with a token-normalised loss: the largest difference of their loss curves and "
    "of their held-out losses, nats/token."
)


def markdown_section(result: Aggregate) -> list[str]:
    if result.table("training").empty:
        return leakage_markdown(result)
    return [
        "\n## Training: $ per 1M training tokens and cost to the target loss\n",
        NOTE + "\n",
        md_table(records(result.table("training_cost"), COST_HEADERS)),
        "\n### Cheapest to the target loss per method and package\n",
        md_table(records(trn.cheapest_to_target(result.table("training_cost")), COST_HEADERS)),
        "\n### Training rows\n",
        md_table(records(result.table("training"), ROW_HEADERS)),
        "\n### Accumulation equivalence on the measured rows\n",
        ACCUMULATION_NOTE + "\n",
        md_table(records(trn.accumulation_pairs(result.table("training")), ACCUMULATION_HEADERS)),
        *leakage_markdown(result),
    ]


def html_section(result: Aggregate, html_table: HtmlTable) -> list[str]:
    if result.table("training").empty:
        return leakage_html(result, html_table)
    cost: list[Column] = table_columns(COST_HEADERS)
    rows: list[Column] = table_columns(ROW_HEADERS)
    return [
        '<h2 id="training">Training: $ per 1M training tokens and cost to the target loss</h2>',
        f'<p class="note">{escape(NOTE)}</p>',
        html_table(result.table("training_cost"), cost, "training-cost"),
        "<h3>Cheapest to the target loss per method and package</h3>",
        html_table(trn.cheapest_to_target(result.table("training_cost")), cost, "training-target"),
        "<h3>Training rows</h3>",
        html_table(result.table("training"), rows, "training-rows"),
        "<h3>Accumulation equivalence on the measured rows</h3>",
        f'<p class="note">{escape(ACCUMULATION_NOTE)}</p>',
        html_table(
            trn.accumulation_pairs(result.table("training")),
            table_columns(ACCUMULATION_HEADERS),
            "training-accumulation",
        ),
        *leakage_html(result, html_table),
    ]


class Report:
    """The training mode's report sections (harness.modes.base.ReportPart). Its tables are its
    own Markdown ones (``md_table``: "(no rows)" when empty), not the core's."""

    def markdown(self, result: Aggregate, quality_class: str, table: MdTable) -> list[str]:
        return markdown_section(result)

    def html(self, result: Aggregate, quality_class: str, table: HtmlTable) -> list[str]:
        return html_section(result, table)

    def summary(self, result: Aggregate) -> dict[str, pd.DataFrame]:
        return {}  # summary.json states no training table (its tables are in the report's files)


REPORT = Report()
