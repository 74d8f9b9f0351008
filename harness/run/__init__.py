"""Running a sweep: ``sweep`` (scenario → groups of work, manifest, skip rows), ``driver`` (Ray),
``node`` (what a node offers), ``worker`` (the device side: one group on one device), ``store``
(where results live), ``contracts`` (what orchestration and worker agree on), ``provenance``."""
