"""The trainer (device side): transformers + peft (+ bitsandbytes for qlora and AdamW8bit).
The same code runs on the CPU, CUDA and ROCm; torch, transformers, peft and bitsandbytes are
imported inside functions.

A step: `grad_accum` micro-batches of `micro_batch` windows of `seq_len` tokens; each micro-batch's
loss is its tokens' summed NLL divided by the *step's* count of predicted tokens (token-normalised:
the accumulated gradient equals that of one batch holding every window), backward after each; the
gradient norm is read (and clipped at `MAX_GRAD_NORM`), then one optimizer step. The held-out loss
is the token-weighted mean NLL over the eval windows (nats/token), with a bootstrap CI over windows.

`loss_normalisation="micro-mean"` is the common mistake the accumulation check exists for: each
micro-batch's mean over its own tokens, divided by `grad_accum` (equal to "token" only when every
micro-batch predicts the same number of tokens: no padding).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness.measure import quality
from harness.measure.memory import PhaseMemory, measure_phase
from harness.modes.training.spec import TrainingPoint

MAX_GRAD_NORM = 1.0  # gradients are clipped to this global L2 norm (the reported norm is pre-clip)
IGNORE = -100  # the label of a position that is not predicted (padding)
LossNormalisation = Literal["token", "micro-mean"]


@dataclass
class StepRecord:
    loss: float  # nats/token over the step's predicted tokens
    grad_norm: float  # global L2 norm of the accumulated gradient, before clipping
    seconds: float
    phases: dict[str, PhaseMemory] | None = None  # forward / backward / optimizer (one step)


@dataclass
class EvalResult:
    nll_sum: list[float]  # per window, nats
    tokens: list[int]  # predicted tokens per window

    @property
    def loss(self) -> float:
        return float(sum(self.nll_sum) / sum(self.tokens))

    def ci(self, samples: int = 1000, seed: int = 0) -> tuple[float, float]:
        """95 % bootstrap interval of the held-out loss (nats/token), windows resampled."""
        low, high = quality.bootstrap_ppl_ci(self.nll_sum, self.tokens, samples=samples, seed=seed)
        return math.log(low), math.log(high)


@dataclass
class TrainRun:
    steps: list[StepRecord] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (steps done, eval loss)
    final_eval: EvalResult | None = None


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(
        name, torch.float32
    )


def load_model(
    model_path: str,
    train: TrainingPoint,
    device: str,
    *,
    seed: int = 0,
    random_weights: bool = False,
) -> Any:
    """The model ready to train: full (every parameter), LoRA on the frozen base in its dtype,
    or LoRA on a bnb-nf4 base (qlora). Seeded, so LoRA's initialisation is reproducible."""
    import torch
    import transformers

    tf: Any = transformers  # untyped in places: one Any for the module
    AutoConfig, AutoModelForCausalLM = tf.AutoConfig, tf.AutoModelForCausalLM
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(model_path)
    dtype = torch_dtype(str(getattr(config, "dtype", None) or "float32").removeprefix("torch."))
    if train.method == "qlora":
        quant = tf.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
        )
        model = AutoModelForCausalLM.from_pretrained(
            model_path, quantization_config=quant, dtype=dtype, device_map={"": device}
        )
    elif random_weights:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device)
    model.config.use_cache = False
    import peft

    lib: Any = peft
    if train.method == "qlora":
        model = lib.prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=train.gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    elif train.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if train.uses_lora:
        torch.manual_seed(seed)
        lora = lib.LoraConfig(
            r=train.lora_r,
            lora_alpha=train.lora_alpha,
            lora_dropout=train.lora_dropout,
            target_modules=list(train.lora_targets),
            task_type="CAUSAL_LM",
        )
        model = lib.get_peft_model(model, lora)
    model.train()
    return model


def save_peft(model: Any, folder: Path, base_model: str, revision: str) -> None:
    """A LoRA model's adapter as peft writes it (adapter_config.json, adapter_model.safetensors),
    its config naming the base by its model id and revision (not this machine's path), written
    into a temporary sibling folder and renamed into place (an earlier folder replaced)."""
    import shutil

    config = model.peft_config["default"]
    config.base_model_name_or_path = base_model
    config.revision = revision
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(tmp), safe_serialization=True, save_embedding_layers=False)
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def trainable(model: Any) -> list[tuple[str, Any]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def make_optimizer(params: Sequence[Any], name: str, lr: float) -> Any:
    """torch AdamW, or bitsandbytes' AdamW8bit (blockwise 8-bit moments)."""
    if name == "adamw-8bit":
        import bitsandbytes

        bnb: Any = bitsandbytes
        return bnb.optim.AdamW8bit(list(params), lr=lr)
    import torch

    return torch.optim.AdamW(list(params), lr=lr)


def batch_tensors(rows: list[list[int]], device: str, pad_id: int = 0) -> tuple[Any, Any, Any]:
    """(input_ids, attention_mask, labels): rows right-padded to the longest; padding is masked
    out of attention and labelled IGNORE, and so are a row's prompt tokens (stored as
    ``data.prompt_tokens`` writes them: fed to the model, never predicted)."""
    import torch

    width = max(len(r) for r in rows)
    raw = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        raw[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    prompt = raw < 0
    ids = torch.where(prompt, -1 - raw, raw)
    labels = ids.masked_fill((mask == 0) | prompt, IGNORE)
    return ids.to(device), mask.to(device), labels.to(device)


def predicted_tokens(rows: list[list[int]]) -> int:
    """Positions with a next token to predict: len − 1 per row, less its prompt tokens after
    the first (a prompt token is never predicted)."""
    return sum(sum(1 for t in r[1:] if t >= 0) for r in rows)


def nll_sums(model: Any, ids: Any, mask: Any, labels: Any) -> Any:
    """Per-row summed NLL (nats) of the next token over the labelled positions, and their counts."""
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    shift_logits = logits[:, :-1, :]
    shift_labels = labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(
        shift_logits.reshape(-1, shift_logits.size(-1)),
        shift_labels.reshape(-1),
        ignore_index=IGNORE,
        reduction="none",
    ).view(shift_labels.shape)
    counts = (shift_labels != IGNORE).sum(dim=1)
    return nll.sum(dim=1), counts


def micro_loss(
    model: Any,
    rows: list[list[int]],
    device: str,
    *,
    step_tokens: int,
    grad_accum: int,
    normalisation: LossNormalisation = "token",
) -> Any:
    """The loss whose backward this micro-batch contributes (see the module docstring)."""
    ids, mask, labels = batch_tensors(rows, device)
    sums, counts = nll_sums(model, ids, mask, labels)
    if normalisation == "token":
        return sums.sum() / step_tokens
    return sums.sum() / counts.sum().clamp(min=1) / grad_accum


def accumulate(
    model: Any,
    micro_batches: list[list[list[int]]],
    device: str,
    *,
    normalisation: LossNormalisation = "token",
    phases: dict[str, PhaseMemory] | None = None,
) -> float:
    """Forward and backward every micro-batch; gradients accumulate in .grad. Returns the step's
    loss (nats/token, token-normalised whatever `normalisation` the gradients used). With
    `phases`, the last micro-batch's forward and backward memory is measured into it."""
    import torch

    step_tokens = sum(predicted_tokens(mb) for mb in micro_batches)
    total = 0.0
    for i, rows in enumerate(micro_batches):
        last = phases is not None and i == len(micro_batches) - 1
        forward: AbstractContextManager[Any] = measure_phase(device) if last else nullcontext()
        with forward as fwd:
            loss = micro_loss(
                model,
                rows,
                device,
                step_tokens=step_tokens,
                grad_accum=len(micro_batches),
                normalisation=normalisation,
            )
        backward: AbstractContextManager[Any] = measure_phase(device) if last else nullcontext()
        with backward as bwd:
            loss.backward()
        if last and phases is not None:
            phases["forward"], phases["backward"] = fwd.result, bwd.result
        with torch.no_grad():
            if normalisation == "token":
                total += float(loss)
            else:  # the same figure, token-normalised, for the record
                ids, mask, labels = batch_tensors(rows, device)
                sums, _ = nll_sums(model, ids, mask, labels)
                total += float(sums.sum()) / step_tokens
    return total


def grad_norm(params: Sequence[Any]) -> float:
    import torch

    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    )


class Trainer:
    """One training run of one configuration on one device."""

    def __init__(
        self,
        model: Any,
        train: TrainingPoint,
        device: str,
        *,
        normalisation: LossNormalisation = "token",
    ) -> None:
        self.model = model
        self.train = train
        self.device = device
        self.normalisation = normalisation
        self.params = [p for _, p in trainable(model)]
        self.optimizer = make_optimizer(self.params, train.optimizer, train.lr)
        self.step = 0  # optimizer steps done

    def run_step(
        self, micro_batches: list[list[list[int]]], *, measure: bool = False
    ) -> StepRecord:
        import torch

        phases: dict[str, PhaseMemory] | None = {} if measure else None
        sync = self._sync
        sync()
        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss = accumulate(
            self.model, micro_batches, self.device, normalisation=self.normalisation, phases=phases
        )
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM))
        opt: AbstractContextManager[Any] = measure_phase(self.device) if measure else nullcontext()
        with opt as handle:
            self.optimizer.step()
        sync()
        seconds = time.perf_counter() - started
        if phases is not None:
            phases["optimizer"] = handle.result
        self.step += 1
        return StepRecord(loss=loss, grad_norm=norm, seconds=seconds, phases=phases)

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()

    def evaluate(self, windows: list[list[int]], batch: int = 8) -> EvalResult:
        import torch

        self.model.eval()
        sums: list[float] = []
        counts: list[int] = []
        with torch.no_grad():
            for at in range(0, len(windows), batch):
                ids, mask, labels = batch_tensors(windows[at : at + batch], self.device)
                s, c = nll_sums(self.model, ids, mask, labels)
                sums += [float(v) for v in s]
                counts += [int(v) for v in c]
        self.model.train()
        return EvalResult(nll_sum=sums, tokens=counts)

    # --- resume --------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """What a resumed run needs: the trainable parameters, the optimizer's state, the step,
        and the RNG state (the data of a step depends on its index only)."""
        import torch

        folder.mkdir(parents=True, exist_ok=True)
        weights = {n: p.detach().cpu().clone() for n, p in trainable(self.model)}
        torch.save(
            {
                "step": self.step,
                "trainable": weights,
                "optimizer": self.optimizer.state_dict(),
                "rng": torch.get_rng_state(),
            },
            folder / "checkpoint.pt",
        )

    def load(self, folder: Path, *, optimizer_state: bool = True) -> None:
        """Resume from `save`. `optimizer_state=False` drops the optimizer's moments (the
        mistake the resume check exists to catch)."""
        import torch

        state = torch.load(folder / "checkpoint.pt", weights_only=False)
        named = dict(trainable(self.model))
        with torch.no_grad():
            for name, value in state["trainable"].items():
                named[name].copy_(value.to(named[name].device))
        if optimizer_state:
            self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        self.step = int(state["step"])


def run(
    trainer: Trainer,
    batches: Any,
    eval_windows: list[list[int]],
    *,
    until: int | None = None,
    measure_step: int | None = None,
    eval_every: int | None = None,
) -> Iterator[tuple[StepRecord | None, EvalResult | None]]:
    """Steps from `trainer.step` to `until` (default: the configuration's steps). `batches(step)`
    gives a step's micro-batches. Yields each step's record, and an evaluation (before the first
    step, every `eval_every` steps, after the last) as (None, result)."""
    train = trainer.train
    stop = train.steps if until is None else until
    every = eval_every if eval_every is not None else train.eval_every
    if trainer.step == 0 and eval_windows:
        yield None, trainer.evaluate(eval_windows)
    while trainer.step < stop:
        record = trainer.run_step(batches(trainer.step), measure=trainer.step == measure_step)
        yield record, None
        done = trainer.step
        if eval_windows and (done % every == 0 or done == train.steps):
            yield None, trainer.evaluate(eval_windows)


def median_step_s(records: list[StepRecord], skip: set[int]) -> float:
    """Median step time, leaving out the first step (warm-up) and the steps in `skip` (those
    measured for memory: the sampler thread competes for the cores)."""
    kept = [r.seconds for i, r in enumerate(records) if i != 0 and i not in skip]
    if not kept:
        kept = [r.seconds for r in records]
    return float(np.median(kept))
