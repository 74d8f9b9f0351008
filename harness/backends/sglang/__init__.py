"""SGLang: `card` (its facts and its names for each format), `options` (its options model, by
its ServerArgs names), `args` (a group as `sglang.Engine(**kwargs)` and as the arguments of
`python -m sglang.launch_server`), `backend` (`SglangBackend`, its offline engine in this
process) and `server` (its OpenAI-compatible server). sglang is imported only inside
functions. It runs where a GPU is: its PyPI build's kernels are CUDA's (sglang-kernel,
flashinfer, cuda-python), so it is not run on this CPU (docs/development/adding-an-engine.md)."""
