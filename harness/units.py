"""Units, said once: MiB = 2**20 bytes, GiB = 2**30 bytes; seconds unless a name says ms."""

MIB = 2**20
GIB = 2**30

# units of the published columns, spelled out (the labels abbreviate them)
MTOK_OUT_USD = "USD per 1e6 output tokens"
MTOK_OUT_J = "J per 1e6 output tokens"
NATS = "nats/token"
PROMPT_SHARE = "share of the prompt tokens looked up in the prefix cache"


def to_mib(n_bytes: float) -> float:
    return n_bytes / MIB


def to_gib(n_bytes: float) -> float:
    return n_bytes / GIB
