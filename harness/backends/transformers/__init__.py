"""The transformers engine: `card` (its facts and its names for each format, read through
harness.spec.engines), `options` (its options model) and `backend` (`TransformersBackend`, eager
HF models). torch and transformers are imported only inside the backend's functions."""
