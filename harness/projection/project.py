"""The projection formulas: a measured figure on one card carried to another, pure functions.

A configuration keeps its bytes and FLOPs from card to card; what changes is the card's peak.
So a measured figure's *share of its roofline* is carried, and the projection is the measured
figure times the ratio of the two cards' peaks:

  decode  (memory-bound):  projected tok/s = measured tok/s × (B_target × n) / (B_source × n)
          (B: HBM bandwidth GB/s, n: cards; the roofline's bytes per step cancel);
  prefill (compute-bound): projected tok/s = measured tok/s × P_target(format) / P_source(format)
          (P: dense tensor peak TFLOP/s for the format: fp8 units for fp8 weights, fp4 units
          for NVFP4/MXFP4 where the card has them, else bf16);
  pure roofline (beside it, no measured share): decode ceiling = B × n × 1e9 × batch / bytes
          per step (harness.plan / measure.roofline); prefill ceiling = P × n × 1e12 /
          (2 × active linear parameters) tokens/s.

A card projected onto itself gets the measured figure back exactly (the ratio is 1.0).
"""

from __future__ import annotations

from harness import plan
from harness.measure import roofline
from harness.spec import catalog
from harness.spec.capabilities import WEIGHT_FORMATS
from harness.spec.catalog import GpuSpec, ModelArch

# Weight formats whose matrix multiplies run on fp8 tensor units (the card must have them).
FP8_COMPUTE_FORMATS = frozenset({"fp8", "fp8-block"})
# KV-cache dtypes stored as fp8, whose bit layout differs by vendor (see ``fp8_flavour``).
FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3"})


def peak_tflops(card: GpuSpec, weights: str) -> float | None:
    """The card's dense peak for a weight format, TFLOP/s; None where the card has no unit for
    it (fp8 weights on an A100). A format of the capability table takes its tensor units' peak
    (catalog.format_peak_tflops: fp4 only where the card has fp4 units of its flavour); a free-
    text external format (fp16, int4, …) the bf16 one."""
    if weights in WEIGHT_FORMATS:
        return catalog.format_peak_tflops(card, weights)
    return card.fp8_tflops if weights in FP8_COMPUTE_FORMATS else card.bf16_tflops


def cannot_run(card: GpuSpec, weights: str) -> str | None:
    """Why the card cannot run the format at its speed, or None."""
    if peak_tflops(card, weights) is None:
        return f"{card.name} has no fp8 tensor units: {weights} weights would not run as measured"
    return None


def fp8_flavour(card: GpuSpec) -> str:
    """The fp8 e4m3 layout a card computes in: AMD's CDNA3 uses e4m3fnuz (no negative zero,
    bias 8), NVIDIA e4m3fn; a checkpoint or cache in one is converted (and may differ) on the
    other."""
    if card.fp8_flavour:  # the catalog's (CDNA 4 moved to OCP e4m3fn)
        return card.fp8_flavour
    return "e4m3fnuz" if card.vendor == "amd" else "e4m3fn"


def fp8_flag(source: GpuSpec, target: GpuSpec, weights: str, kv_cache_dtype: str) -> str:
    """A warning where an fp8 format changes layout between the two cards, else ''."""
    fp8 = weights in FP8_COMPUTE_FORMATS or kv_cache_dtype in FP8_KV_DTYPES
    if not fp8 or fp8_flavour(source) == fp8_flavour(target):
        return ""
    return (
        f"fp8 {fp8_flavour(source)} on {source.name} vs {fp8_flavour(target)} on {target.name}: "
        "quality measured in one layout, not the other"
    )


def scaled(measured: float, source_peak: float, target_peak: float) -> float:
    """measured × target_peak / source_peak; exactly ``measured`` when the peaks are equal."""
    if source_peak <= 0 or target_peak <= 0:
        raise ValueError(f"peaks must be > 0, got {source_peak} and {target_peak}")
    return measured * (target_peak / source_peak)


def project_decode(measured_tok_s: float, source: GpuSpec, target: GpuSpec, gpus: int = 1) -> float:
    """Decode tok/s on ``target`` at the measured share of the bandwidth roofline."""
    return scaled(measured_tok_s, source.bandwidth_gb_s * gpus, target.bandwidth_gb_s * gpus)


def project_prefill(
    measured_tok_s: float, source: GpuSpec, target: GpuSpec, weights: str, gpus: int = 1
) -> float | None:
    """Prefill tok/s on ``target`` at the measured share of the compute roofline for the format;
    None where either card lacks the format's units (``cannot_run``)."""
    source_peak, target_peak = peak_tflops(source, weights), peak_tflops(target, weights)
    if source_peak is None or target_peak is None:
        return None
    return scaled(measured_tok_s, source_peak * gpus, target_peak * gpus)


def decode_roofline_tok_s(
    card: GpuSpec, arch: ModelArch, weights: str, batch: int, context: int, output: int,
    gpus: int = 1,
) -> float:  # fmt: skip
    """The pure bandwidth roofline of a decode (aggregate tok/s) over ``gpus`` cards: the bytes
    the planner says a step reads (``plan.decode_step_bytes``: the weights less an untied input
    embedding, the batch's KV cache at the mean decode context)."""
    read, kv = plan.decode_step_bytes(
        arch, plan.weights_bytes(arch, weights), weights, "auto", batch, context, output
    )
    return roofline.decode_ceiling_tok_s(card.bandwidth_gb_s * gpus, read, kv, batch)


def prefill_roofline_tok_s(card: GpuSpec, arch: ModelArch, weights: str, gpus: int = 1) -> float:
    """The pure compute roofline of a prefill, tok/s: P × n × 1e12 / (2 × active linear params)
    (attention's own FLOPs left out: under 10 % at the contexts measured here)."""
    peak = peak_tflops(card, weights)
    if peak is None:
        raise ValueError(f"{card.name} has no units for {weights}")
    return peak * gpus * 1e12 / (2 * plan.param_counts(arch).active_linear)
