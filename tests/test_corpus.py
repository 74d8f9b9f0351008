"""The shipped corpus and the shipped tiny model: bytes, slicing rules, and that the model works."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from harness import corpus

TINY = corpus.CORPUS_DIR.parent / "tiny-llama"

SHIPPED_SHA256 = {
    "wiki.test.raw": "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
    "wiki.valid.raw": "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
    "arc_easy.jsonl": "d2d12e59543acf9a5ef6079634a72b30215e36c2fd4236fff3bc855d287b87f5",
}


# --- shipped bytes -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHIPPED_SHA256))
def test_shipped_corpus_file_matches_its_published_sha256(name: str) -> None:
    data = (corpus.CORPUS_DIR / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHIPPED_SHA256[name]


def test_corpus_files_ship_with_their_licences() -> None:
    licences = (corpus.CORPUS_DIR / "LICENSES.md").read_text(encoding="utf-8")
    assert "CC BY-SA 3.0" in licences and "Pointer Sentinel Mixture Models" in licences
    assert "CC BY-SA 4.0" in licences and "arXiv:1803.05457" in licences


def test_corpus_hash_is_16_hex_digits_and_stable() -> None:
    value = corpus.corpus_hash()
    assert len(value) == 16 and int(value, 16) >= 0
    corpus.corpus_hash.cache_clear()
    assert corpus.corpus_hash() == value


def test_eval_text_is_the_file_bytes_without_newline_translation() -> None:
    assert corpus.eval_text().encode("utf-8") == corpus.EVAL_FILE.read_bytes()


# --- windows -------------------------------------------------------------------------------


def test_windows_are_non_overlapping_exact_length_and_drop_the_tail() -> None:
    ids = list(range(1000))
    got = corpus.windows(ids, 64, None)
    assert len(got) == 1000 // 64
    assert all(len(w) == 64 for w in got)
    assert [w[0] for w in got] == [k * 64 for k in range(len(got))]
    assert [t for w in got for t in w] == ids[: len(got) * 64]


def test_windows_subset_is_evenly_spaced_over_the_whole_corpus() -> None:
    ids = list(range(100 * 8))  # 100 windows of 8 tokens
    got = corpus.windows(ids, 8, 7)
    starts = [w[0] // 8 for w in got]
    assert starts == [round(i * 100 / 7) for i in range(7)]
    assert starts[0] == 0 and starts[-1] > 80  # reaches the end, not only the first pages
    assert corpus.windows(ids, 8, 7) == got  # deterministic


def test_windows_keeps_all_when_max_windows_is_not_smaller_than_the_count() -> None:
    ids = list(range(40))
    assert corpus.windows(ids, 10, 4) == corpus.windows(ids, 10, None) == corpus.windows(ids, 10, 9)


def test_windows_rejects_a_zero_window_length() -> None:
    with pytest.raises(ValueError, match="window_tokens"):
        corpus.windows([1, 2, 3], 0, None)


# --- calibration ---------------------------------------------------------------------------


def test_calibration_paragraphs_are_long_deterministic_and_not_in_the_eval_text() -> None:
    paragraphs = corpus.calibration_texts(64)
    assert len(paragraphs) == 64 and len(set(paragraphs)) == 64
    assert all(len(p) >= 200 and not p.startswith("=") for p in paragraphs)
    assert corpus.calibration_texts(64) == paragraphs
    eval_text = corpus.eval_text()
    assert not any(p in eval_text for p in paragraphs)


def test_calibration_asking_for_too_many_paragraphs_says_how_many_there_are() -> None:
    with pytest.raises(ValueError, match="has only"):
        corpus.calibration_texts(10**6)


# --- prompt windows ------------------------------------------------------------------------


def test_prompt_windows_give_exactly_context_tokens_in_distinct_rows() -> None:
    ids = list(range(10_000))
    rows = corpus.prompt_windows(ids, batch=16, context=512)
    assert len(rows) == 16 and all(len(r) == 512 for r in rows)
    assert len({tuple(r) for r in rows}) == 16
    assert len({r[0] for r in rows}) == 16  # different starts: no shared prefix
    assert all(r == ids[r[0] : r[0] + 512] for r in rows)  # no wrap when the corpus suffices
    assert corpus.prompt_windows(ids, batch=16, context=512) == rows


def test_prompt_windows_wrap_around_a_corpus_too_short_for_distinct_slices() -> None:
    ids = list(range(100))
    rows = corpus.prompt_windows(ids, batch=8, context=250)
    assert len(rows) == 8 and all(len(r) == 250 for r in rows)
    assert len({tuple(r) for r in rows}) == 8
    assert all(r[k] == (r[0] + k) % 100 for r in rows for k in range(250))


def test_prompt_windows_refuse_more_rows_than_tokens() -> None:
    with pytest.raises(ValueError, match="distinct prompts"):
        corpus.prompt_windows([1, 2, 3], batch=4, context=2)


# --- the tiny model ------------------------------------------------------------------------


def test_tiny_model_config_has_gqa_and_dimensions_in_multiples_of_64() -> None:
    config = json.loads((TINY / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "llama"
    assert config["num_attention_heads"] == 4 and config["num_key_value_heads"] == 2
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    for key in ("hidden_size", "intermediate_size", "vocab_size"):
        assert config[key] % 64 == 0, key
    assert config["vocab_size"] == 4096 and config["tie_word_embeddings"] is True
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (0, 1, 2)


def test_tiny_model_is_small_and_records_how_it_was_trained() -> None:
    size = sum(f.stat().st_size for f in TINY.iterdir() if f.is_file())
    assert size <= 25 * 2**20
    facts = json.loads((TINY / "training.json").read_text(encoding="utf-8"))
    assert facts["params"] == 4_196_608
    assert facts["steps"] > 0 and facts["seed"] == 0
    assert facts["test_ppl"] < 1000  # far below the 4,096 of a uniform guess


@pytest.mark.engine
def test_tiny_tokenizer_loads_offline_and_round_trips_a_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = corpus.load_tokenizer(str(TINY))
    specials = [tokenizer.convert_ids_to_tokens(i) for i in range(4)]
    assert specials == ["<pad>", "<s>", "</s>", "<unk>"]
    sentence = " = Valkyria = \n The game , released in 2011 , cost £ 3 @,@ 000 — naïve café .\n"
    ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
    assert all(i >= 4 for i in ids)
    assert tokenizer.decode(ids) == sentence


@pytest.fixture(scope="module")
def tiny_eval_tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[int], Path]:
    """The eval text tokenized once by the tiny tokenizer, cached under a temporary cache dir."""
    pytest.importorskip("transformers")
    cache = tmp_path_factory.mktemp("harness-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HARNESS_CACHE_DIR", str(cache))
        patch.setenv("HF_HUB_OFFLINE", "1")
        return corpus.tokenize_eval(str(TINY)), cache


@pytest.mark.engine
def test_eval_tokens_are_cached_on_disk_keyed_by_corpus_and_tokenizer(
    tiny_eval_tokens: tuple[list[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, cache = tiny_eval_tokens
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(cache))
    cached = cache / "tokens" / f"{corpus.corpus_hash()}-{corpus.tokenizer_hash(str(TINY))}.npy"
    assert cached.is_file()
    assert len(ids) > 300_000 and all(i >= 4 for i in ids[:1000])
    assert corpus.tokenize_eval(str(TINY)) == ids  # read back from the cache


@pytest.mark.engine
def test_tiny_model_loads_offline_and_predicts_test_text_far_better_than_chance(
    tiny_eval_tokens: tuple[list[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(TINY), local_files_only=True, dtype=torch.float32
    )
    model.eval()
    assert sum(p.numel() for p in model.parameters()) == 4_196_608
    batch = torch.tensor(corpus.windows(tiny_eval_tokens[0], 256, 8))
    with torch.inference_mode():
        loss = model(input_ids=batch, labels=batch).loss
    assert math.exp(float(loss)) < 1000
