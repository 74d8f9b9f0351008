"""The memory of one training step, per phase (bytes; GiB = 2**30): pure, no torch.

weights      the base in its format (the planner's weights_bytes) + the LoRA adapters
gradients    one per trainable parameter, in that parameter's dtype (full: the model's dtype;
             LoRA adapters: fp32, as peft keeps them)
optimizer    adamw: two moments per trainable parameter (torch keeps them in the parameter's
             dtype: two fp32 moments = 8 bytes for fp32 parameters);
             adamw-8bit (bitsandbytes AdamW8bit): a tensor of at least 4,096 values keeps two
             uint8 moments + one fp32 absmax per 256-value block per moment + two 256-entry fp32
             quantization maps; a smaller tensor keeps two fp32 moments (min_8bit_size)
activations  what backward needs, per layer and token (compute dtype): the residual input and
             its norm (2h), q/k/v (h + 2·kv) and q/k after RoPE (h + kv), the attention
             probabilities (2 · heads · seq_len: eager/SDPA-math softmax and its input), the
             attention output (h), the second norm (2h), the MLP's gate, up, act(gate), product
             (4·I); plus fp32 logits over every position and their log-softmax (2 · B·S·V·4).
             With gradient checkpointing: each layer's input (h) + one layer recomputed.
reserve      runtime (CUDA/HIP context or the CPU process) + allocator margin (the planner's)

forward      weights + optimizer states (they live from the first step on) + activations
             (+ gradients when accumulating: they live between micro-batches) + reserve
backward     weights + optimizer states + gradients + activations + logits' gradient + reserve
optimizer    weights + gradients + optimizer states + the update's temporaries (foreach AdamW:
             about one more copy of the trainable parameters) + reserve
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.modes.training.spec import TrainingPoint
from harness.spec.catalog import MLP_LINEARS, ModelArch

LORA_DTYPE_BYTES = 4  # peft keeps adapters in fp32 (autocast_adapter_dtype)
BNB_MIN_8BIT_SIZE = 4096  # bitsandbytes keeps 32-bit states for smaller tensors
BNB_BLOCK = 256  # values per absmax block of a blockwise 8-bit state
BNB_QMAP_BYTES = 2 * 256 * 4  # two 256-entry fp32 maps per 8-bit tensor


def lora_tensors(arch: ModelArch, r: int, targets: tuple[str, ...]) -> list[int]:
    """Element counts of the LoRA tensors: per layer and target, A (r × in) and B (out × r). MLP
    targets on a mixture-of-experts model count once per expert."""
    shapes = arch.linear_shapes()
    out: list[int] = []
    for _ in range(arch.num_layers):
        for name in targets:
            fan_in, fan_out = shapes[name]
            copies = arch.num_experts if name in MLP_LINEARS else 1
            out += [r * fan_in, fan_out * r] * copies
    return out


def full_tensors(arch: ModelArch) -> list[int]:
    """Element counts of every parameter tensor of the model (all of them train)."""
    h = arch.hidden_size
    shapes = arch.linear_shapes()
    out = [arch.vocab_size * h]
    for _ in range(arch.num_layers):
        for name, (fan_in, fan_out) in shapes.items():
            copies = arch.num_experts if name in MLP_LINEARS else 1
            out += [fan_in * fan_out] * copies
        if arch.attention_bias:
            out += [shapes["q_proj"][1], shapes["k_proj"][1], shapes["v_proj"][1]]
        if arch.num_experts > 1:
            out.append(h * arch.num_experts)
        out += [h, h]  # the two RMSNorms
    out.append(h)  # the final norm
    if not arch.tie_embeddings:
        out.append(arch.vocab_size * h)
    return out


def trainable_tensors(arch: ModelArch, train: TrainingPoint) -> list[int]:
    if train.uses_lora:
        return lora_tensors(arch, train.lora_r, train.lora_targets)
    return full_tensors(arch)


def param_bytes(arch: ModelArch, train: TrainingPoint) -> int:
    """Bytes per trainable parameter (and per gradient value)."""
    return LORA_DTYPE_BYTES if train.uses_lora else arch.dtype_bytes


def optimizer_bytes(tensors: list[int], optimizer: str, dtype_bytes: int) -> int:
    """The optimizer's states for these trainable tensors (see the module's formulas)."""
    if optimizer == "adamw":
        return sum(2 * n * dtype_bytes for n in tensors)
    total = 0
    for n in tensors:
        if n >= BNB_MIN_8BIT_SIZE:
            blocks = -(-n // BNB_BLOCK)
            total += 2 * n + 2 * blocks * 4 + BNB_QMAP_BYTES
        else:
            total += 2 * n * 4
    return total


def activation_bytes(arch: ModelArch, train: TrainingPoint, act_bytes: int) -> int:
    """Activations kept for backward (see the module's formulas)."""
    h, s = arch.hidden_size, train.seq_len
    tokens = train.micro_batch * s
    kv = arch.num_kv_heads * arch.head_dim
    q = arch.num_heads * arch.head_dim
    per_token = 2 * h + (q + 2 * kv) + (q + kv) + 2 * arch.num_heads * s + q + 2 * h
    per_token += 4 * arch.intermediate_size * arch.experts_per_token
    layer = tokens * per_token * act_bytes
    logits = 2 * tokens * arch.vocab_size * 4
    if train.gradient_checkpointing:
        return arch.num_layers * tokens * h * act_bytes + layer + logits
    return arch.num_layers * layer + logits


class TrainingMemory(BaseModel):
    """One training step's plan, in bytes, by term and by phase."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trainable_params: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits_grad: float
    reserve: float
    forward: float
    backward: float
    optimizer_step: float

    @property
    def peak(self) -> float:
        return max(self.forward, self.backward, self.optimizer_step)

    @property
    def terms(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "reserve": self.reserve,
        }


def plan_step(
    arch: ModelArch,
    train: TrainingPoint,
    *,
    base_weights_bytes: float,
    act_bytes: int,
    runtime_bytes: float,
    margin: float,
) -> TrainingMemory:
    """The step's memory per phase; `runtime_bytes` and `margin` are the planner's reserve."""
    tensors = trainable_tensors(arch, train)
    n = sum(tensors)
    dtype = param_bytes(arch, train)
    adapters = n * dtype if train.uses_lora else 0
    weights = base_weights_bytes + adapters
    grads = float(n * dtype)
    states = float(optimizer_bytes(tensors, train.optimizer, dtype))
    acts = float(activation_bytes(arch, train, act_bytes))
    logits_grad = float(train.micro_batch * train.seq_len * arch.vocab_size * 4)
    temporaries = float(n * dtype)
    reserve = runtime_bytes + margin * (weights + grads + states + acts)
    accumulating = grads if train.grad_accum > 1 else 0.0
    return TrainingMemory(
        trainable_params=n,
        weights=weights,
        gradients=grads,
        optimizer=states,
        activations=acts,
        logits_grad=logits_grad,
        reserve=reserve,
        forward=weights + states + acts + accumulating + reserve,
        backward=weights + states + grads + acts + logits_grad + reserve,
        optimizer_step=weights + grads + states + temporaries + reserve,
    )


def step_flops(total_params: int, train: TrainingPoint) -> float:
    """FLOPs of one optimizer step: 6 per parameter and token for full training (forward 2,
    backward 4), 4 for LoRA (no weight gradients for the frozen base)."""
    per_token = (6 if not train.uses_lora else 4) * total_params
    return float(per_token * train.tokens_per_step)


def eval_flops(total_params: int, train: TrainingPoint) -> float:
    """FLOPs of every held-out evaluation of a run (every `eval_every` steps and at the end)."""
    evals = train.steps // train.eval_every + 1
    return float(2 * total_params * train.eval_windows * train.seq_len * evals)
