"""The llama.cpp engine through llama-cpp-python: `card` (its facts and its GGUF names for each
format), `options` (its options model), `gguf` (the model folder converted to GGUF files, once
per format), `backend` (`LlamaCppBackend`, the model in this process) and `server` (its
OpenAI-compatible server, `python -m llama_cpp.server`). llama_cpp is imported only inside
functions: the harness plans and publishes where it is not installed."""
