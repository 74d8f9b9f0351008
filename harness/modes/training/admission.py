"""A training row's own parts against each other (its `check` part, read by
harness.results.admission where rows join a run):

tokens_per_step = micro_batch × grad_accum × seq_len; micro_batch = batch and seq_len = context
(the point's columns); train_tok_s = tokens_per_step ÷ step_s; trainable_params ≤ total_params.
"""

from __future__ import annotations

from harness.results.admission import apart
from harness.row import ResultRow


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
    if tok_s is not None and expected is not None and apart(tok_s, expected, 0.0):
        return (
            f"train_tok_s {tok_s:g} ≠ tokens_per_step {per_step} ÷ step_s {step:g} = {expected:g}"
        )
    trainable, total = row.trainable_params, row.total_params
    if trainable is not None and total is not None and trainable > total:
        return f"trainable_params {trainable} is above total_params {total}"
    return None
