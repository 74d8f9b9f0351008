"""What was measured beats what was planned: a configuration measured on a card fits that card,
whatever the plan says; where the plan says it does not, the verdict says the plan disagrees and
by how much (the plan's peak against the measured one, else against the card)."""

from __future__ import annotations

from harness.plan import PointPlan


def measured_fit(plan: PointPlan, peak_mib: float | None) -> tuple[bool, str]:
    """(fits, why) of a configuration measured on ``plan``'s card, its measured peak
    ``peak_mib`` (MiB; None or NaN where not measured)."""
    if plan.fits:
        return True, plan.reason
    if peak_mib is not None and peak_mib == peak_mib and peak_mib > 0:
        peak = peak_mib / 1024
        gap = (
            f"plans {plan.total_gib:.2f} GiB where {peak:.2f} GiB was measured "
            f"({plan.total_gib - peak:+.2f} GiB, {100 * (plan.total_gib / peak - 1):+.0f} %)"
        )
    else:
        over = plan.total_gib - plan.capacity_gib
        gap = f"plans {plan.total_gib:.2f} GiB, {over:.2f} GiB over {plan.capacity_gib:.2f} GiB"
    return True, f"measured on this card; the plan disagrees: it {gap} ({plan.reason})"
