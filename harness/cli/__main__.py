"""`python -m harness.cli ...` (what the containers' entrypoint runs)."""

from harness.cli.main import main

main()
