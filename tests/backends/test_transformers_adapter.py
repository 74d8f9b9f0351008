"""A LoRA adapter loads on the transformers backend with peft, after its binding is checked, and
changes what the model scores; the row's provenance names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.backends.base import BackendOptions
from harness.backends.transformers.backend import TransformersBackend
from harness.errors import UserInputError
from harness.run import provenance
from harness.run.device import bound_adapter
from harness.spec import adapters, models
from harness.spec.scenario import GroupKey

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

TINY = models.PACKAGE_DATA / "tiny-llama"
PAIRS = [("Utterance: play some jazz\nIntent:", " PlayMusic"), ("The cat", " sat on the mat")]


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real PEFT LoRA folder on the tiny model (random A and B: it must change the logits),
    saved and bound as the training mode saves one."""
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    from harness.modes.training.device.trainer import save_peft

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(TINY))
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                             init_lora_weights=False, task_type="CAUSAL_LM")  # fmt: skip
    model = peft.get_peft_model(base, config)
    folder = tmp_path_factory.mktemp("adapters") / "random-lora"
    save_peft(model, folder, "tiny-llama", "main")
    adapters.write_binding(folder, adapters.binding_for(folder, "tiny-llama", "main", TINY, None))
    return folder


def group(adapter: Path | None) -> GroupKey:
    return GroupKey(target="cpu", model="tiny-llama", revision="main", backend="transformers",
                    quantization="none", kv_cache_dtype="auto",
                    adapter=None if adapter is None else str(adapter))  # fmt: skip


def scores(adapter: Path | None) -> list[float]:
    bound = bound_adapter(group(adapter), models.resolve("tiny-llama"))
    options = BackendOptions(device="cpu", model_path=str(TINY),
                             adapter_path=str(bound.path) if bound else None,
                             adapter_rank=bound.rank if bound else None)  # fmt: skip
    backend = TransformersBackend(group(adapter), options)
    backend.load()
    try:
        if adapter is not None:
            assert type(backend.model).__name__ == "PeftModelForCausalLM"
        return backend.score_continuations(PAIRS)
    finally:
        backend.close()


def test_the_adapter_loads_with_peft_and_changes_the_scores(adapter_dir: Path) -> None:
    base, tuned = scores(None), scores(adapter_dir)
    assert all(abs(a - b) > 1e-3 for a, b in zip(base, tuned, strict=True)), (base, tuned)


def test_a_saved_adapter_names_its_base_by_id_not_this_machines_path(adapter_dir: Path) -> None:
    read = adapters.read_adapter(adapter_dir)
    assert read.base_model == "tiny-llama" and read.rank == 4
    assert read.targets == ("q_proj", "v_proj")
    assert read.base_weights_sha256 == adapters.weights_hash(TINY)


def test_the_worker_refuses_an_adapter_whose_base_weights_differ(
    adapter_dir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-base"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"other weights")
    base = models.ResolvedModel("tiny-llama", "main", other, "local")
    with pytest.raises(UserInputError, match="base weights"):
        bound_adapter(group(adapter_dir), base)


def test_the_rows_provenance_carries_the_adapter(adapter_dir: Path) -> None:
    read = adapters.read_adapter(adapter_dir)
    prov = provenance.collect("cpu", "c", adapter=read)
    assert prov.adapter_path == str(adapter_dir.resolve())
    assert prov.adapter_sha256 == adapters.weights_hash(adapter_dir)
    assert prov.adapter_base is not None and prov.adapter_base.startswith("tiny-llama@main")
    assert read.base_weights_sha256[:16] in prov.adapter_base
    assert provenance.collect("cpu", "c").adapter_path is None
