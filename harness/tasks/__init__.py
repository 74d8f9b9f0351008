"""Tasks as data (``spec``: the file format, the strict loader and the one prompt rendering),
their metrics (``metrics``: pure numpy, paired per item or per field against the reference),
and the shipped tasks (``builtin``: SNIPS intent and slots)."""
