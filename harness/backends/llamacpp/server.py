"""llama.cpp's OpenAI-compatible server (`python -m llama_cpp.server`, llama-cpp-python's
`llama_cpp/server/settings.py` names) for one group: the group's GGUF file, its context, batch,
KV type and flash attention as the offline backend sets them."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.backends.base import BackendOptions, Server
from harness.backends.llamacpp.backend import LlamaCppBackend
from harness.backends.llamacpp.card import CARD, GGML_TYPE
from harness.backends.llamacpp.gguf import gguf_file
from harness.spec.scenario import GroupKey


class LlamaCppServer(Server):
    @classmethod
    def command(
        cls, group: GroupKey, options: BackendOptions, host: str, port: int, served_model_name: str
    ) -> list[str]:
        """The server's command line; the GGUF file is made first where it is missing."""
        backend = LlamaCppBackend(group, options)  # the same checks and settings as offline
        cache = Path(options.cache_dir or Path.home() / ".cache" / "harness" / "gguf")
        path = gguf_file(
            Path(options.model_path), CARD.weights[group.quantization].file_type, cache
        )
        kv = str(GGML_TYPE[backend.kv_type_name()])
        own = backend.own
        args = [
            "--model", str(path), "--model_alias", served_model_name,
            "--n_ctx", str(max(options.max_context, 256)), "--n_batch", str(own.n_batch),
            "--n_ubatch", str(own.n_batch), "--type_k", kv, "--type_v", kv,
            "--flash_attn", str(own.flash_attn), "--seed", str(options.seed),
            "--host", host, "--port", str(port), "--verbose", "False",
        ]  # fmt: skip
        if own.n_threads is not None:
            args += ["--n_threads", str(own.n_threads)]
        return [sys.executable, "-m", "llama_cpp.server", *args]
