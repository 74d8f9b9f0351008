"""The process paths a group can run in, behind one protocol (`base.Launcher`): `inline` (this
process, no Ray: `harness measure`), `forked` (a child of its node's host server, through a Ray
task) and `actor` (a fresh Ray actor that imports its engine). Each names the device side's
parts it starts by reference, loaded when it is built, so the orchestration side never imports
the device side."""
