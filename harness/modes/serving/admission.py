"""A serving row's own parts against each other (its `check` part, read by
harness.results.admission where rows join a run):

requests_ok + requests_failed = requests_sent; goodput_rps ≤ request_throughput;
request_throughput × serving_duration_s = requests_ok; the attainment recomputable:
slo_attainment × requests_sent requests met the SLO, at most requests_ok of them, and
goodput_rps × serving_duration_s is that count; output_tok_s × serving_duration_s (the level's
output tokens) at most ``OUTPUT_SLACK`` × the mean output length per successful request (the
lengths are drawn round N(mean, sd): their mean is near the nominal one).

Exact identities are held to harness.results.admission's ``REL`` and counts to ``HALF`` a request.
"""

from __future__ import annotations

from harness.results.admission import above, apart
from harness.row import ResultRow

HALF = 0.5  # a count recomputed from a rate × a duration: within half a request
OUTPUT_SLACK = 8.0  # output tokens per successful request, against the level's mean length


def serving_problem(row: ResultRow) -> str | None:
    sent, ok, failed = row.requests_sent, row.requests_ok, row.requests_failed
    duration, thr, good = row.serving_duration_s, row.request_throughput, row.goodput_rps
    if sent is not None and ok is not None and failed is not None and ok + failed != sent:
        return f"requests_ok {ok} + requests_failed {failed} ≠ requests_sent {sent}"
    if good is not None and thr is not None and above(good, thr):
        return (
            f"goodput_rps {good:g} is above request_throughput {thr:g} (a request that meets "
            "the SLO is a successful one)"
        )
    duration = duration if duration is not None and duration > 0 else None  # timed, or not
    if (
        duration is not None
        and thr is not None
        and ok is not None
        and apart(thr * duration, ok, HALF)
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
        if ok is not None and above(met, ok + HALF / 10):
            return (
                f"slo_attainment {attained:g} of requests_sent {sent} = {met:g} requests met "
                f"the SLO, more than requests_ok {ok}"
            )
        if duration is not None and good is not None and apart(good * duration, met, HALF):
            return (
                f"goodput_rps {good:g} × serving_duration_s {duration:g} = "
                f"{good * duration:g} requests met the SLO, but slo_attainment {attained:g} × "
                f"requests_sent {sent} = {met:g}"
            )
    tok_s = row.output_tok_s
    if tok_s is not None and duration is not None and ok is not None:
        tokens = tok_s * duration
        ceiling = ok * OUTPUT_SLACK * max(row.output_tokens, 1)
        if above(tokens, ceiling):
            return (
                f"output_tok_s {tok_s:g} × serving_duration_s {duration:g} = {tokens:g} output "
                f"tokens from {ok} successful requests: above {ceiling:g} ({OUTPUT_SLACK:g} × the "
                f"mean output length {row.output_tokens} per request)"
            )
    return None
