"""Training mode, device side: `run` (a group's training points, one fresh model each),
`trainer` (transformers + peft), `checks` (accumulation equivalence, resume)."""
