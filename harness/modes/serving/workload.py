"""Workloads as data (pure): a replayed Mooncake-format trace and multi-turn conversations, turned
into the token ids of each request's prompt, built from the shipped corpus.

**Trace** (`serving.workload.trace`): each JSONL line has `timestamp` (ms), `input_length`,
`output_length` and `hash_ids` (Mooncake's remapped 512-token prefix blocks: equal ids = the
same block of text after the same blocks before it). The first `max_requests` lines are read;
lengths × `length_scale` (at least 1 token), a block is B = round(512 × `length_scale`) tokens,
a request keeps the first ⌈prompt / B⌉ of its hash ids.

Each hash id gets one block of corpus tokens, the same wherever it appears: a consecutive
slice of the corpus's token ids that starts on a word (a token that decodes to a space and a
letter), ends before one, and survives a decode/encode round trip on its own. Two blocks that
follow the same parent block (siblings in the trace's prefix tree) never start with the same
token. So the token ids of two prompts agree exactly over the blocks whose hash ids agree
and differ at the first token after them: requests sharing their first k hash ids share
exactly k × B prompt tokens, and no more. Because every block starts on a word boundary, no
BPE merge crosses from one block into the next, and the text sent (the decoded ids)
encodes back to the same ids (a last, partial block may re-merge within itself, which no other
request shares past its own first token).

**Arrivals**: `vllm bench serve` replays a trace's own timestamps only with its `timed_trace`
dataset, whose prompts are random vocabulary ids, not corpus text; its `custom` dataset (the
one this mode sends) takes arrivals from `--request-rate` and `--burstiness` (gamma
inter-arrival times). A trace's arrivals are therefore sent as a gamma process with the
trace's own mean rate (requests − 1 over the span of the scaled timestamps) and shape
1 / CV² of its inter-arrival gaps (`trace_arrivals`), not the timestamps themselves.

**Multi-turn** (`serving.workload.multi_turn`): N conversations of K turns; every prompt begins
with one S-token system prompt; turn i of a conversation is the system prompt, then the user
text and the answer of each earlier turn, then its own user text (`prompt_tokens`), and asks
for `output_tokens`. Conversations' first user texts start with different tokens, so two
conversations share exactly the system prompt. The earlier answers resent are corpus text of
the answer's length, not what the model answered (the generator sends a fixed dataset).
Requests go turn by turn (every conversation's turn 0 first), so a turn is sent after the turn
it extends.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import UserInputError, as_field, quote
from harness.files import JsonRefused, read_capped, strict_json, text_lines
from harness.modes.serving.spec import (
    MAX_LENGTH,
    MOONCAKE_CONVERSATION,
    SPARE_TOKENS,
    ServingLevel,
    Workload,
    draw_lengths,
)

TRACES_DIR = Path(__file__).resolve().parents[2] / "data" / "traces"
SHIPPED_TRACES = {MOONCAKE_CONVERSATION: TRACES_DIR / "mooncake_conversation.jsonl"}
MAX_TRACE_BYTES = 64 << 20
MIN_BURSTINESS, MAX_BURSTINESS = 0.01, 100.0  # the gamma shape sent, clipped to this range

Encode = Callable[[str], list[int]]
Decode = Callable[[list[int]], str]


class TraceRequest(BaseModel):
    """One trace line, as read (milliseconds and tokens at the trace's own scale)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, allow_inf_nan=False)

    timestamp: float = Field(ge=0)
    input_length: int = Field(ge=1, le=MAX_LENGTH)
    output_length: int = Field(ge=1, le=MAX_LENGTH)
    hash_ids: list[int]


TRACE_LINE = (
    "expected a JSON object with timestamp (ms), input_length, output_length (integer tokens) "
    "and hash_ids (a list of integers)"
)


class Request(BaseModel):
    """One request to send: seconds after the first, tokens, and its blocks' hash ids."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


# -- reading a trace ---------------------------------------------------------------------------
def trace_path(name: str) -> Path:
    """The shipped trace a name stands for, or the path as given."""
    return SHIPPED_TRACES.get(name, Path(name).expanduser())


def read_trace(name: str, max_requests: int) -> list[TraceRequest]:
    """The first `max_requests` lines of a trace (``harness.files``' rules for JSON lines); a
    bad line or a short trace is the user's error (file, line, field)."""
    path = trace_path(name)
    try:
        data = read_capped(path, MAX_TRACE_BYTES, "a serving trace")
    except OSError as exc:
        raise UserInputError(
            f"cannot read the trace ({exc.strerror or exc}): expected a Mooncake-format JSONL "
            f"file or {MOONCAKE_CONVERSATION}",
            file=str(path),
            field="serving.workload.trace",
        ) from None
    out: list[TraceRequest] = []
    parent_of: dict[int, int | None] = {}  # each prefix block's parent, as the trace gives it
    for number, line in enumerate(text_lines(data, path, "the trace"), start=1):
        if len(out) == max_requests:
            break
        if line.strip():
            out.append(_trace_line(line, str(path), number))
            _prefix_tree(out[-1].hash_ids, parent_of, str(path), number)
    if len(out) < max_requests:
        raise UserInputError(
            f"the trace has {len(out)} requests, fewer than max_requests {max_requests}",
            file=str(path),
            field="serving.workload.max_requests",
        )
    return out


def _prefix_tree(
    ids: Sequence[int], parent_of: dict[int, int | None], file: str, line: int
) -> None:
    """Refuse a request whose hash ids break the trace's prefix tree (a block after two
    different blocks, or twice in one request): its prompts could not be built, and the engine
    would fail after its load. Said at plan, with the file and line."""
    parent: int | None = None
    for h in ids:
        if h in parent_of and parent_of[h] != parent:
            before = "the start" if parent_of[h] is None else f"block {parent_of[h]}"
            now = "the start" if parent is None else f"block {parent}"
            raise UserInputError(
                f"hash id {h} follows {now} here and {before} earlier: a trace's "
                "hash ids form a prefix tree (equal ids = the same prefix)",
                file=file,
                line=line,
                field="hash_ids",
            )
        parent_of[h] = parent
        parent = h


def _trace_line(line: str, file: str, number: int) -> TraceRequest:
    def refuse(message: str, field: str | None = None) -> UserInputError:
        return UserInputError(message, file=file, line=number, field=field)

    try:
        data = strict_json(line)
    except JsonRefused as exc:
        raise refuse(str(exc), as_field(exc.key) if exc.key is not None else None) from None
    except (ValueError, RecursionError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise refuse(f"not JSON ({why}); {TRACE_LINE}") from None
    if not isinstance(data, dict):
        raise refuse(f"a JSON {type(data).__name__}; {TRACE_LINE}")
    try:
        return TraceRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{as_field(p)}" for p in err["loc"])
        got = "missing" if err["type"] == "missing" else f"{err['msg']} (got {quote(err['input'])})"
        raise refuse(f"{got}; {TRACE_LINE}", field.lstrip(".")) from None


def scaled_requests(workload: Workload) -> list[Request]:
    """The trace's requests at the workload's scales: arrival seconds from the first request
    (× time_scale), lengths × length_scale (at least 1), the hash ids of the blocks kept."""
    assert workload.trace is not None and workload.max_requests is not None
    rows = read_trace(workload.trace, workload.max_requests)
    block = workload.block_tokens
    start = min(r.timestamp for r in rows)
    out = []
    for r in rows:
        prompt = max(1, round(r.input_length * workload.length_scale))
        if r.hash_ids:
            prompt = min(prompt, len(r.hash_ids) * block)
        out.append(
            Request(
                arrival_s=(r.timestamp - start) / 1000.0 * workload.time_scale,
                prompt_tokens=min(prompt, MAX_LENGTH),
                output_tokens=max(1, round(r.output_length * workload.length_scale)),
                hash_ids=tuple(r.hash_ids[: math.ceil(prompt / block)]),
            )
        )
    return out


def trace_arrivals(requests: Sequence[Request]) -> tuple[float, float]:
    """(requests per second, gamma shape) of the trace's arrivals: the mean rate over the span
    of its timestamps ((n − 1) / span) and 1 / CV² of the gaps between arrivals in time order
    (1 for a Poisson process; below 1, burstier), clipped to [0.01, 100]."""
    times = sorted(r.arrival_s for r in requests)
    span = times[-1] - times[0]
    if len(times) < 2 or span <= 0:
        raise UserInputError(
            "a trace's arrivals need two distinct timestamps among the requests replayed",
            field="serving.workload.max_requests",
        )
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = statistics.fmean(gaps)
    cv2 = statistics.pvariance(gaps) / (mean * mean)
    shape = 1.0 / cv2 if cv2 > 0 else MAX_BURSTINESS
    return (len(times) - 1) / span, min(MAX_BURSTINESS, max(MIN_BURSTINESS, shape))


# -- lengths (what the plan and the server's max_model_len see) ---------------------------------
def multi_turn_lengths(level: ServingLevel) -> list[tuple[int, int]]:
    """(prompt, output) tokens per request of a multi-turn workload, in sending order."""
    assert level.workload is not None and level.workload.multi_turn is not None
    mt = level.workload.multi_turn
    drawn = draw_lengths(level.prompt_tokens, level.output_tokens, mt.conversations * mt.turns,
                         level.seed)  # fmt: skip
    out = []
    for turn in range(mt.turns):
        for conv in range(mt.conversations):
            turns = drawn[conv * mt.turns : conv * mt.turns + turn + 1]
            history = sum(u + a for u, a in turns[:-1])
            out.append((mt.shared_system_tokens + history + turns[-1][0], turns[-1][1]))
    return out


def level_lengths(level: ServingLevel) -> list[tuple[int, int]]:
    """(prompt, output) tokens per request of a level, in sending order (before a prompt is
    shortened to fit max_model_len): the trace's, the conversations', or the drawn ones."""
    workload = level.workload
    if workload is not None and workload.trace is not None:
        return [(r.prompt_tokens, r.output_tokens) for r in scaled_requests(workload)]
    if workload is not None and workload.multi_turn is not None:
        return multi_turn_lengths(level)
    return level.drawn_lengths()


def longest_sequence(level: ServingLevel) -> int:
    """The most tokens one request of the level holds (prompt + output + the round trip's
    spare), before prompts are cut to the model."""
    return max(p + o for p, o in level_lengths(level)) + SPARE_TOKENS


# -- building prompts from the corpus -----------------------------------------------------------
class BlockBook:
    """Corpus slices handed out in order: each starts on a word, ends before one, and survives
    a decode/encode round trip alone; `avoid` keeps a slice's first token off a set."""

    def __init__(self, ids: Sequence[int], encode: Encode, decode: Decode) -> None:
        if not ids:
            raise ValueError("the corpus text gave no tokens")
        self.ids, self.encode, self.decode = list(ids), encode, decode
        self.cursor = 0
        self._word: dict[int, bool] = {}

    def word_start(self, token: int) -> bool:
        if token not in self._word:
            text = self.decode([token])
            self._word[token] = len(text) > 1 and text[0] == " " and text[1].isalpha()
        return self._word[token]

    def take(self, length: int, avoid: frozenset[int] | set[int] = frozenset()) -> list[int]:
        """The next slice of `length` tokens that fits the rules (the corpus wraps around)."""
        n = len(self.ids)
        for _ in range(n):
            p = self.cursor
            self.cursor = (self.cursor + 1) % n
            piece = [self.ids[(p + k) % n] for k in range(length)]
            if piece[0] in avoid or not self.word_start(piece[0]):
                continue
            if not self.word_start(self.ids[(p + length) % n]):
                continue
            if self.encode(self.decode(piece)) != piece:
                continue
            self.cursor = (p + length) % n
            return piece
        raise ValueError(f"the corpus has no {length}-token slice that starts on a new word")

    def cut(self, ids: list[int], length: int) -> list[int]:
        """`ids` cut to at most `length` tokens where the text round trip keeps them: before the
        last word start at or below `length` (whole blocks end there already); `length` itself
        when no word starts in between."""
        if length >= len(ids):
            return ids
        for end in range(length, 0, -1):
            if self.word_start(ids[end]):
                return ids[:end]
        return ids[:length]


def trace_prompt_ids(
    requests: Sequence[Request], block: int, book: BlockBook, max_prompt: int | None = None
) -> list[list[int]]:
    """The token ids of each request's prompt: its blocks' tokens, cut to its length (or to
    `max_prompt`, which keeps every shared prefix a prefix) where the round trip keeps them
    (`BlockBook.cut`: up to a word shorter than the trace says)."""
    blocks: dict[int, list[int]] = {}
    firsts: dict[int | None, set[int]] = {}
    parent_of: dict[int, int | None] = {}
    prompts = []
    for request in requests:
        ids: list[int] = []
        parent: int | None = None
        for h in request.hash_ids:
            if h not in blocks:
                siblings = firsts.setdefault(parent, set())
                blocks[h] = book.take(block, avoid=siblings)
                siblings.add(blocks[h][0])
                parent_of[h] = parent
            elif parent_of[h] != parent:
                raise ValueError(f"hash id {h} follows two different blocks: not a prefix trace")
            ids += blocks[h]
            parent = h
        if not request.hash_ids:
            ids = book.take(request.prompt_tokens)
        wanted = (
            request.prompt_tokens if max_prompt is None else min(request.prompt_tokens, max_prompt)
        )
        prompts.append(book.cut(ids, wanted))
    return prompts


def multi_turn_prompt_ids(
    level: ServingLevel, book: BlockBook, max_prompt: int | None = None
) -> list[tuple[list[int], int]]:
    """(prompt token ids, output tokens) per request of a multi-turn workload, in sending order
    (turn by turn), each prompt cut to `max_prompt`."""
    assert level.workload is not None and level.workload.multi_turn is not None
    mt = level.workload.multi_turn
    drawn = draw_lengths(level.prompt_tokens, level.output_tokens, mt.conversations * mt.turns,
                         level.seed)  # fmt: skip
    system = book.take(mt.shared_system_tokens) if mt.shared_system_tokens else []
    firsts: set[int] = set()  # conversations part right after the system prompt
    texts = []
    for conv in range(mt.conversations):
        own = drawn[conv * mt.turns : (conv + 1) * mt.turns]
        turns = [(book.take(u, firsts if not i else frozenset()), book.take(a))
                 for i, (u, a) in enumerate(own)]  # fmt: skip
        firsts.add(turns[0][0][0])
        texts.append(turns)
    out = []
    for turn in range(mt.turns):
        for conv in range(mt.conversations):
            ids = list(system)
            for user, answer in texts[conv][:turn]:
                ids += user + answer
            ids += texts[conv][turn][0]
            out.append((book.cut(ids, max_prompt or len(ids)), len(texts[conv][turn][1])))
    return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
