"""`make perf`'s aggregation half: harness.peers.perf_aggregate says what it times."""

from harness.peers.perf_aggregate import main

if __name__ == "__main__":
    main()
