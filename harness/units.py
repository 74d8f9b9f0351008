"""Units, said once: MiB = 2**20 bytes, GiB = 2**30 bytes; seconds unless a name says ms."""

MIB = 2**20
GIB = 2**30


def to_mib(n_bytes: float) -> float:
    return n_bytes / MIB


def to_gib(n_bytes: float) -> float:
    return n_bytes / GIB
