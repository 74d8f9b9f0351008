"""What every publication states besides the numbers: the formulas and the data licences."""

from __future__ import annotations

from harness.measure.verdict import METHOD

LICENCES = [
    (
        "WikiText-2 (raw), the perplexity corpus",
        "WikiText-2 (raw) by Stephen Merity, Caiming Xiong, James Bradbury and Richard Socher "
        '(Salesforce Research), from "Pointer Sentinel Mixture Models", arXiv:1609.07843 (2016). '
        "Text extracted from verified Good and Featured articles of the English Wikipedia, "
        "© Wikipedia contributors. Licensed under CC BY-SA 3.0 "
        "(https://creativecommons.org/licenses/by-sa/3.0/). Files redistributed unchanged.",
    ),
    (
        "ARC-Easy, the shipped task arc-easy",
        "ARC (AI2 Reasoning Challenge), Easy set, test split, by Peter Clark, Isaac Cowhey, Oren "
        "Etzioni, Tushar Khot, Ashish Sabharwal, Carissa Schoenick and Oyvind Tafjord (Allen "
        'Institute for AI), "Think you have Solved Question Answering? Try ARC, the AI2 Reasoning '
        'Challenge", arXiv:1803.05457 (2018). Licensed CC BY-SA 4.0 '
        "(https://creativecommons.org/licenses/by-sa/4.0/). Reformatted by MosaicML "
        "(mosaicml/llm-foundry); modified from the original (format only).",
    ),
]

FORMULAS = [
    "$/Mtok (package) = (package price ÷ (days × 24) ÷ utilisation) × GPUs used ÷ GPUs in the "
    "package ÷ (tok/s × 3600) × 10⁶ — decode tok/s for output tokens, total tok/s for all tokens",
    "tokens per package = tok/s × 3600 × days × 24 × utilisation × ⌊GPUs in package ÷ GPUs "
    "used⌋ (the replicas a node holds; GPUs used = the layout's tensor × pipeline ranks)",
    "breakeven utilisation = package price ÷ (hourly price × days × 24): above it the package "
    "costs less than hourly billing for the same hours of work",
    "package price = hourly × 24 × days × (1 − discount ÷ 100) when a tariff gives a discount",
    *(f"equal quality, {what}: {text}" for what, text in METHOD.items()),
    "Δppl % = (exp(ΔNLL) − 1) × 100, ΔNLL the paired per-window NLL difference against the "
    "reference, with its bootstrap 95 % CI",
    "serving: a request meets the SLO when TTFT ≤ target and TPOT = (e2e − TTFT) ÷ (output tokens "
    "− 1) ≤ target; attainment = requests meeting it ÷ requests sent; goodput = requests meeting "
    "it ÷ the level's duration; $/Mtok out at the SLO = the package formula on the highest output "
    "tok/s among ok load levels whose attainment ≥ the scenario's; quality from the "
    "configuration's offline rows",
]
