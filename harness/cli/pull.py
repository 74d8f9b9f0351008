"""`harness pull SCENARIO`: fetch every model the sweep will load before the GPU clock runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from harness.console import console, shown
from harness.errors import UserInputError
from harness.units import GIB

DISK_HEADROOM = 1.05  # free space wanted beyond the files themselves


def pull(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    dry_run: Annotated[bool, typer.Option(help="list what is needed, fetch nothing")] = False,
) -> None:
    """List what each model needs and its size, check free disk, fetch what is not cached."""
    from harness.spec import models
    from harness.spec import scenario as scen

    loaded = scen.load(scenario)
    todo: list[tuple[str, str]] = []
    needed = 0
    for ref in loaded.models:
        if ref.weights == "random":  # the architecture only: config.json, fetched if missing
            arch = models.resolve(ref.id, ref.revision, need="config")
            console.print(
                f"{shown(ref.id)}@{shown(ref.revision)}: random weights, config.json at "
                f"{shown(arch.path)}"
            )
            continue
        found = None
        if not models.is_hub_id(ref.id) or (Path(ref.id).expanduser() / "config.json").is_file():
            found = models.resolve(ref.id, ref.revision, need="weights")
        else:
            snapshot = models.cached_snapshot(ref.id, ref.revision)
            if snapshot is not None and models.complete(snapshot, "weights"):
                found = models.resolve(ref.id, ref.revision, need="weights")
        if found is not None:
            console.print(
                f"{shown(ref.id)}@{shown(ref.revision)}: ready at {shown(found.path)} "
                f"({found.source})"
            )
            continue
        if models.offline():
            raise UserInputError(
                f"model {ref.id!r} (revision {ref.revision!r}) is not in the Hugging Face cache at "
                f"{models.cache_dir()} and HF_HUB_OFFLINE is set: unset it and run "
                f"`harness pull {scenario}` where the hub is reachable",
                field="models.id",
            )
        commit, files = models.remote_files(ref.id, ref.revision, models.patterns("weights"))
        missing = sum(f.size or 0 for f in files if not f.cached)
        needed += missing
        console.print(
            f"{shown(ref.id)}@{shown(ref.revision)} ({shown(commit[:12])}): {len(files)} files, "
            f"{sum(f.size or 0 for f in files) / GIB:.2f} GiB, {missing / GIB:.2f} GiB to fetch"
        )
        todo.append((ref.id, ref.revision))
    cache = models.cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache).free
    if needed * DISK_HEADROOM > free:
        raise UserInputError(
            f"the models need {needed / GIB:.2f} GiB and {cache} has {free / GIB:.2f} GiB free: "
            "free space or point HF_HUB_CACHE at a larger disk",
            field="disk",
        )
    if dry_run:
        return
    for model_id, revision in todo:
        found = models.resolve(model_id, revision, need="weights")
        console.print(
            f"{shown(model_id)}@{shown(revision)}: fetched to {shown(found.path)} "
            f"(commit {shown(found.commit)})"
        )
