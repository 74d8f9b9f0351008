"""What a sweep is asked to do, validated before anything runs: scenario files (``scenario``,
read through ``yamlinput``), the capability table per axis (``capabilities``), which combinations
can run (``compat``), the catalog of GPUs and model architectures (``catalog``), and tariffs."""
