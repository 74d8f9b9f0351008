"""Training-step scenarios (mode: training): the memory plan of a step (`memory`, pure), the data
split (`data`), the trainer (`trainer`, transformers + peft, engines imported inside functions),
the checks the guides ask for (`checks`: accumulation equivalence, resume) and the n-gram leakage
between what a model saw and what it is scored on (`leakage`, pure)."""
