"""A Hugging Face Llama folder (config.json, model.safetensors, tokenizer.json) as GGUF files:
the documented, scripted step that gives llama.cpp the same model transformers loads.

`convert` writes the checkpoint in its own float dtype (F32, F16 or BF16) with the `gguf`
package, as llama.cpp's convert_hf_to_gguf.py writes a LlamaForCausalLM (the same tensor names,
the same q/k row permutation from Hugging Face's rotate-half RoPE layout to llama.cpp's, norms
kept in f32); `quantize` turns that file into a quantized one with llama.cpp's own quantizer
(`llama_model_quantize`). `gguf_file(folder, file_type, cache)` does both once per folder and file
type and reuses the result (keyed by the folder's files' digest).

Only dense Llama-family checkpoints are converted (the shipped tiny model, and Llama/Mistral-like
models without biases); anything else is refused by name. Run it by hand:
``python -m harness.backends.llamacpp.gguf MODEL_DIR OUT_DIR [F32 F16 Q8_0 Q4_K_M ...]``.
`gguf` and `llama_cpp` are imported inside the functions.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.backends.llamacpp.card import LLAMA_FTYPE
from harness.errors import UserInputError

FLOAT_TYPES = ("F32", "F16", "BF16")
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3  # gguf.TokenType
# Hugging Face tensor names -> GGUF's (llama.cpp's LLM_ARCH_LLAMA tensor names).
LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def folder_digest(folder: Path) -> str:
    """sha256 over the folder's config, weights and tokenizer (what a GGUF file is made of)."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        path = folder / name
        if path.is_file():
            digest.update(name.encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def checkpoint_float_type(config: dict[str, Any]) -> str:
    """The GGUF float type of a checkpoint's own dtype (F32, F16 or BF16)."""
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    return {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}.get(dtype, "F32")


def permute_rope_rows(weights: NDArray[Any], heads: int) -> NDArray[Any]:
    """q_proj / k_proj rows from Hugging Face's rotate-half RoPE layout (each head's first half
    then its second) to llama.cpp's interleaved pairs: per head, row i of each half alternates
    (convert_hf_to_gguf.py, LlamaModel.permute)."""
    rows = weights.shape[0]
    return (
        weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def read_config(folder: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((folder / "config.json").read_text())
    arch = (config.get("architectures") or ["?"])[0]
    if arch not in ARCHITECTURES or config.get("attention_bias") or config.get("mlp_bias"):
        raise UserInputError(
            f"{folder}: llama.cpp conversion here takes a dense Llama checkpoint without biases "
            f"({', '.join(ARCHITECTURES)}); got {arch}",
            field="models",
        )
    return config


def convert(folder: Path, out: Path, file_type: str = "F32") -> Path:
    """Write the folder's checkpoint as one GGUF file of `file_type` (F32, F16 or BF16)."""
    import gguf
    from safetensors.numpy import load_file

    if file_type not in FLOAT_TYPES:
        raise ValueError(f"convert writes {FLOAT_TYPES}; quantize the result for {file_type}")
    config = read_config(folder)
    tensors = load_file(str(folder / "model.safetensors"))
    writer = gguf.GGUFWriter(str(out), "llama")
    write_metadata(writer, config, file_type)
    write_tokenizer(writer, folder, config)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for name, array in sorted(tensors.items()):
        gguf_name = tensor_name(name)
        if gguf_name is None:
            continue
        data = np.asarray(array, dtype=np.float32)
        if name.endswith("self_attn.q_proj.weight"):
            data = permute_rope_rows(data, heads)
        elif name.endswith("self_attn.k_proj.weight"):
            data = permute_rope_rows(data, kv_heads)
        array_out, raw = stored(data, file_type)
        writer.add_tensor(gguf_name, array_out, **raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def stored(data: NDArray[Any], file_type: str) -> tuple[NDArray[Any], dict[str, Any]]:
    """A tensor as the file stores it, and add_tensor's raw-type arguments: norms (1-D) in
    f32, matrices in the file's float type (BF16 packed by gguf's own quantizer)."""
    import gguf

    if data.ndim == 1 or file_type == "F32":
        return data, {}
    if file_type == "F16":
        return data.astype(np.float16), {}
    bf16 = gguf.GGMLQuantizationType.BF16
    packed = gguf.quants.quantize(data, bf16)
    return packed, {"raw_shape": packed.shape, "raw_dtype": bf16}


def tensor_name(name: str) -> str | None:
    """GGUF's name of a Hugging Face tensor (None: not stored, e.g. a tied lm_head)."""
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if name in fixed:
        return fixed[name]
    parts = name.split(".")
    if parts[:2] != ["model", "layers"] or not name.endswith(".weight"):
        return None
    inner = ".".join(parts[3:-1])
    return f"blk.{parts[2]}.{LAYER_TENSORS[inner]}.weight" if inner in LAYER_TENSORS else None


def write_metadata(writer: Any, config: dict[str, Any], file_type: str) -> None:
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    rope = config.get("rope_parameters") or {}
    writer.add_name(str(config.get("_name_or_path") or "harness-model"))
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(heads))
    writer.add_head_count_kv(int(config["num_key_value_heads"]))
    writer.add_key_length(int(head_dim))
    writer.add_value_length(int(head_dim))
    writer.add_rope_dimension_count(int(head_dim))
    writer.add_rope_freq_base(float(rope.get("rope_theta") or config.get("rope_theta") or 1e4))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(int(config["vocab_size"]))
    writer.add_file_type(LLAMA_FTYPE[file_type])


def write_tokenizer(writer: Any, folder: Path, config: dict[str, Any]) -> None:
    """The byte-level BPE of tokenizer.json as GGUF's "gpt2" tokenizer (tokens by id, merges,
    special ids). The harness tokenizes with tokenizer.json itself (the same ids transformers
    gets); llama.cpp's own tokenizer serves text given to its server."""
    spec = json.loads((folder / "tokenizer.json").read_text())
    model = spec["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    special = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    vocab.update(special)
    size = int(config["vocab_size"])
    tokens = [f"[PAD{i}]" for i in range(size)]
    for token, index in vocab.items():
        if index < size:
            tokens[index] = token
    types = [TOKEN_CONTROL if t in special else TOKEN_NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (
        ("bos_token_id", writer.add_bos_token_id),
        ("eos_token_id", writer.add_eos_token_id),
        ("pad_token_id", writer.add_pad_token_id),
    ):
        if config.get(key) is not None:
            add(int(config[key]))
    writer.add_add_bos_token(False)


def quantize(source: Path, out: Path, file_type: str, threads: int = 2) -> Path:
    """llama.cpp's quantizer (`llama_model_quantize`) from a float GGUF file to `file_type`."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPE[file_type]
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params)
    if status != 0:
        raise RuntimeError(f"llama_model_quantize {source} -> {file_type} returned {status}")
    return out


def gguf_file(folder: Path, file_type: str | None, cache: Path) -> Path:
    """The folder's model as a GGUF file of `file_type` (None: the checkpoint's own float type),
    made once under `cache` (keyed by the folder's digest) and reused."""
    config = read_config(folder)
    own = checkpoint_float_type(config)
    wanted = file_type or own
    target = cache / f"{folder.name}-{folder_digest(folder)}" / f"model-{wanted}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    if wanted in FLOAT_TYPES:
        convert(folder, partial, wanted)
    else:
        base = gguf_file(folder, own if own != "BF16" else "F32", cache)
        quantize(base, partial, wanted)
    partial.replace(target)
    return target


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder, out = Path(argv[0]), Path(argv[1])
    for file_type in argv[2:] or ["F32"]:
        print(gguf_file(folder, file_type, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
