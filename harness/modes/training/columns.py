"""The training mode's published columns, each declared once as ``harness.results.columns``
declares a column (its ``ColumnSpec`` fields in order: name, label, unit, formatter, direction),
and gathered there through the registry (the mode's ``columns`` part). Its tables:
``harness.modes.training.report`` (its cells as ``fmt_value`` writes them)."""

from __future__ import annotations

from harness.units import NATS

COLUMNS: tuple[tuple[str, ...] | tuple[str, str, str, str, int], ...] = (
    ("train_method", "method"),
    ("micro_batch", "micro-batch", "sequences", "fmt_value"),
    ("grad_accum", "accum.", "micro-batches per step", "fmt_value"),
    ("seq_len", "seq len", "tokens", "fmt_value"),
    ("optimizer", "optimizer"),
    ("trainable_params", "trainable params", "parameters", "fmt_value"),
    ("train_tok_s", "train tok/s", "tok/s", "fmt_value", +1),
    ("usd_per_mtok_train", "$/1M train tok", "USD per 1e6 training tokens", "fmt_value", -1),
    ("j_per_mtok_train", "J/1M train tok", "J per 1e6 training tokens", "fmt_value", -1),
    ("target_eval_loss", "target loss", NATS, "fmt_value"),
    ("steps_to_target", "steps to target", "optimizer steps", "fmt_value", -1),
    ("usd_to_target", "$ to target", "USD", "fmt_value", -1),
    ("train_peak_mib_forward", "fwd MiB", "MiB", "fmt_value", -1),
    ("predicted_train_mib_forward", "fwd MiB plan", "MiB", "fmt_value"),
    ("train_peak_mib_backward", "bwd MiB", "MiB", "fmt_value", -1),
    ("predicted_train_mib_backward", "bwd MiB plan", "MiB", "fmt_value"),
    ("train_peak_mib_optimizer", "opt MiB", "MiB", "fmt_value", -1),
    ("predicted_train_mib_optimizer", "opt MiB plan", "MiB", "fmt_value"),
    ("step_s", "step s", "s", "fmt_value", -1),
    ("loss_first", "loss first", NATS, "fmt_value"),
    ("loss_last", "loss last", NATS, "fmt_value", -1),
    ("grad_norm_last", "grad norm", "L2 norm", "fmt_value"),
    ("eval_loss", "held-out loss", NATS, "fmt_value", -1),
    ("eval_loss_ci_low", "CI low", NATS, "fmt_value"),
    ("eval_loss_ci_high", "CI high", NATS, "fmt_value"),
    ("dloss_vs_full", "Δ vs full", NATS, "fmt_value", -1),
    ("dloss_vs_full_ci_high", "Δ CI high", NATS, "fmt_value"),
    ("train_pass_99", "pass 99", "", "fmt_value", +1),
    ("split_a", "mb×acc a"),
    ("split_b", "mb×acc b"),
    ("tokens_per_step", "tokens/step", "tokens", "fmt_value"),
    ("max_abs_dloss_curve", "max abs Δ train loss", NATS, "fmt_value", -1),
    ("abs_deval_loss", "abs Δ held-out loss", NATS, "fmt_value", -1),
    ("tolerance", "tolerance", NATS, "fmt_value"),
    ("equivalent", "equivalent"),
)
