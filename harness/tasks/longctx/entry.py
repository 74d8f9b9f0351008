"""A long-context task as a scenario lists it (``quality: {tasks: [{longctx: single_needle,
contexts: [1024, 4096]}]}``): which family, at which context lengths, how many items per length,
where the question sits and what hides the facts. Pydantic only: read with the scenario, before
any tokenizer or engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.tasks.longctx.base import EVAL_SEED_END

Family = Literal["single_needle", "multi_key", "variable_tracking", "frequent_words"]
Question = Literal["after", "agnostic"]
MIN_CONTEXT = 128
MAX_CONTEXT = 131_072
MAX_CONTEXTS = 8
MAX_ITEMS_PER_CONTEXT = 1000
DEFAULT_TOKENIZER = str(Path(__file__).resolve().parents[2] / "data" / "tiny-llama-retrieval")


class LongContextEntry(BaseModel):
    """``longctx``: the family; ``contexts``: lengths in tokens (of ``tokenizer``'s counting;
    default: the shipped tiny-llama-retrieval's), each judged on its own; ``items`` per length,
    needle depths spread evenly from 0 (start) to 1 (end); ``question``: ``after`` (the question
    follows the context inside what the cache holds) or ``agnostic`` (the cache holds the
    context alone; the question is read after it, as kvpress scores); ``haystack``: WikiText test
    sentences (``text``) or a repeated filler (``noise``); evaluation seeds from ``seed``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    longctx: Family
    contexts: Annotated[list[int], Field(min_length=1, max_length=MAX_CONTEXTS)]
    items: int = Field(20, ge=2, le=MAX_ITEMS_PER_CONTEXT)
    question: Question = "after"
    haystack: Literal["text", "noise"] = "text"
    tokenizer: str = Field(DEFAULT_TOKENIZER, min_length=1, max_length=4096)
    seed: int = Field(0, ge=0, lt=EVAL_SEED_END - MAX_ITEMS_PER_CONTEXT)
    name: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")

    @field_validator("contexts")
    @classmethod
    def contexts_in_range_once(cls, contexts: list[int]) -> list[int]:
        for n in contexts:
            if not MIN_CONTEXT <= n <= MAX_CONTEXT:
                raise ValueError(
                    f"context {n} tokens; expected {MIN_CONTEXT} to {MAX_CONTEXT:,} tokens"
                )
        if len(set(contexts)) != len(contexts):
            raise ValueError("a context length is listed twice")
        return sorted(contexts)

    @model_validator(mode="after")
    def tokenizer_exists(self) -> LongContextEntry:
        if not (Path(self.tokenizer) / "tokenizer.json").is_file():
            raise ValueError(
                f"no tokenizer.json in {self.tokenizer!r}; expected a model directory whose "
                "tokenizer counts the contexts' tokens"
            )
        return self

    @property
    def task_name(self) -> str:
        if self.name is not None:
            return self.name
        return f"longctx-{self.longctx.replace('_', '-')}-{self.question}"
