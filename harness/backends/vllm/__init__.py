"""The vLLM backend, one module per job: `dialect` (what differs between the vLLM builds the
harness drives), `args` (a group and its options as engine and sampling arguments), `parse`
(generations and log-probs read from the engine's outputs), `memory` (the KV pool, the worker's
figures, vLLM's out-of-memory errors) and `backend` (`VllmBackend`, which drives the engine in the
group's own process). vLLM and torch are imported only inside functions; this package re-exports
nothing, so callers import from the module that holds the name.
"""
