"""The model resolver: shipped, local and hub ids, from an offline Hugging Face cache."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from harness.errors import UserInputError
from harness.spec import catalog, models
from tests.hfcache import COMMIT, LLAMA_8B_CONFIG, TINY, add_snapshot, hf_cache, tiny_files

__all__ = ["hf_cache"]

HUB_ID = "harness-test/tiny-llama"


def test_a_hub_id_resolves_to_its_cached_snapshot_and_commit(hf_cache: Path) -> None:
    snapshot = add_snapshot(hf_cache, HUB_ID, tiny_files())
    found = models.resolve(HUB_ID, need="weights")
    assert found.path == snapshot and found.commit == COMMIT and found.source == "hub"
    assert found.has_config and found.has_tokenizer and found.has_safetensors


def test_a_commit_revision_resolves_without_refs(hf_cache: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files())
    assert models.resolve(HUB_ID, COMMIT).commit == COMMIT


def test_shipped_and_local_models_need_no_cache(hf_cache: Path, tmp_path: Path) -> None:
    assert models.resolve("tiny-llama").path == TINY and models.resolve("tiny-llama").commit is None
    assert models.resolve(str(TINY)).source == "local"


def test_planning_needs_config_json_only(hf_cache: Path) -> None:
    add_snapshot(hf_cache, "someone/llama-8b-copy", {"config.json": LLAMA_8B_CONFIG})
    assert models.resolve("someone/llama-8b-copy", need="config").has_config
    with pytest.raises(
        UserInputError, match=r"its files not in the Hugging Face cache.*harness pull"
    ):
        models.resolve("someone/llama-8b-copy", need="weights")


def test_catalog_plans_a_cached_hub_id_like_its_catalog_twin(hf_cache: Path) -> None:
    add_snapshot(hf_cache, "someone/llama-8b-copy", {"config.json": LLAMA_8B_CONFIG})
    hub = catalog.model("someone/llama-8b-copy")
    twin = catalog.model("meta-llama/Llama-3.1-8B-Instruct")
    assert hub.model_dump(exclude={"id"}) == twin.model_dump(exclude={"id"})


def one_line(exc: pytest.ExceptionInfo[UserInputError]) -> str:
    text = exc.value.render()
    assert "\n" not in text
    return text


def test_an_unknown_id_offline_names_the_pull_command(hf_cache: Path) -> None:
    with pytest.raises(UserInputError) as caught:
        models.resolve("nobody/nothing", need="config")
    text = one_line(caught)
    assert "'nobody/nothing'" in text and "harness pull" in text and "HF_HUB_OFFLINE" in text


def test_a_revision_not_in_the_cache_is_refused_naming_what_is(hf_cache: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files())
    with pytest.raises(UserInputError) as caught:
        models.resolve(HUB_ID, "v9.9", need="config")
    text = one_line(caught)
    assert "'v9.9'" in text and "revision not in the Hugging Face cache" in text and "main" in text


def test_pickled_weights_are_refused_unless_opted_in(hf_cache: Path) -> None:
    files = {k: v for k, v in tiny_files().items() if k != "model.safetensors"}
    add_snapshot(hf_cache, HUB_ID, {**files, "pytorch_model.bin": b"pickle"})
    with pytest.raises(UserInputError) as caught:
        models.resolve(HUB_ID)
    assert "no safetensors" in one_line(caught) and "allow_pickle" in one_line(caught)
    assert models.resolve(HUB_ID, allow_pickle=True).has_pickled


def test_remote_code_is_refused_unless_opted_in(hf_cache: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files(auto_map={"AutoModel": "modeling.Custom"}))
    with pytest.raises(UserInputError) as caught:
        models.resolve(HUB_ID)
    assert "auto_map" in one_line(caught) and "trust_remote_code" in one_line(caught)
    assert models.resolve(HUB_ID, trust_remote_code=True).commit == COMMIT


def test_hub_refusals_become_one_line_each() -> None:
    from huggingface_hub.errors import GatedRepoError, RevisionNotFoundError

    class Response:
        headers: ClassVar[dict[str, str]] = {}
        status_code = 403
        request = None
        url = "https://huggingface.co"

    gated = GatedRepoError("403 gated", response=Response())  # type: ignore[arg-type]
    text = models.hub_error("meta-llama/Llama-3.1-8B", "main", gated).render()
    assert "gated" in text and "HF_TOKEN" in text and "\n" not in text
    missing = RevisionNotFoundError("404", response=Response())  # type: ignore[arg-type]
    assert "no revision 'nope'" in models.hub_error("a/b", "nope", missing).render()
