"""Tests never reach a model hub: Hugging Face offline mode for every test process; runs record
their phase times in a history of their own.

Ray clusters in tests run with token auth on, as users' clusters do; the token file is this
session's own (0600, in a temporary folder), so no test reads or writes ~/.ray.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The CLI renders at a fixed wide width in tests (and in the commands they start), set before
# harness.console is imported: a line is never wrapped where a temporary path happens to end, so
# tests read lines as written, never joined back (harness.console.log_width).
os.environ["HARNESS_LOG_WIDTH"] = "1000"
os.environ.setdefault("RAY_AUTH_MODE", "token")
if "RAY_AUTH_TOKEN_PATH" not in os.environ and "RAY_AUTH_TOKEN" not in os.environ:
    folder = Path(tempfile.mkdtemp(prefix="harness-ray-auth-"))
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(folder / "auth_token")
# Runs in tests record their phase times in this session's own history, never the node's
# (~/.cache/harness/history.jsonl calibrates `harness plan`: harness.run.history).
os.environ.setdefault(
    "HARNESS_HISTORY", str(Path(tempfile.mkdtemp(prefix="harness-history-")) / "history.jsonl")
)

from harness.run import auth

auth.ensure_token()

import pytest  # noqa: E402

# `make test-fast` (HARNESS_TEST_TIER=fast) leaves out the tests marked engine, ray, browser,
# container, slow, gpu and vllm. No engine or Ray is imported in it: a test module that imports
# one as it is collected is skipped whole, and a test that reaches one while it runs, unmarked,
# fails at the import, by name, instead of slowing the edit loop down unnoticed; and fails by name
# even where the code that reached it caught the error (an energy meter's broad `except`).
TIER_ENGINES = (
    "torch", "transformers", "vllm", "ray", "peft", "bitsandbytes", "gptqmodel", "optimum",
    "accelerate", "llama_cpp", "sglang",
)  # fmt: skip


class EngineInFastTier(Exception):
    """An engine or Ray imported by a running test in the fast tier (deliberately not an
    ImportError, which code that probes for an engine would swallow)."""


class FastTierGuard:
    collecting = True

    def __init__(self) -> None:
        self.reached: list[str] = []  # the engines a running test reached (caught or not)

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] not in TIER_ENGINES:
            return
        if not self.collecting:
            self.reached.append(name)
        if self.collecting:
            raise pytest.skip.Exception(
                f"imports {name}: not in `make test-fast`", allow_module_level=True
            )
        raise EngineInFastTier(
            f"{name} imported under `make test-fast`: mark the test `engine` (or `ray`) so the "
            "fast tier leaves it out"
        )


FAST_TIER = FastTierGuard() if os.environ.get("HARNESS_TEST_TIER") == "fast" else None
if FAST_TIER is not None:
    import sys

    sys.meta_path.insert(0, FAST_TIER)  # type: ignore[arg-type]


def pytest_collection_finish(session: pytest.Session) -> None:
    if FAST_TIER is not None:
        FAST_TIER.collecting = False


def fail_if_an_engine_was_reached() -> None:
    if FAST_TIER is not None and FAST_TIER.reached:
        name, FAST_TIER.reached[:] = FAST_TIER.reached[0], []
        pytest.fail(
            f"{name} imported under `make test-fast` (the code that reached it may have caught "
            "the error): mark the test `engine` (or `ray`) so the fast tier leaves it out",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> object:
    if FAST_TIER is not None:
        FAST_TIER.reached.clear()
    result = yield
    fail_if_an_engine_was_reached()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    result = yield
    fail_if_an_engine_was_reached()
    return result


# Lines the equal-quality gate's calibration tests report (tests/measure/test_calibration.py):
# printed at the end of every run, `make test` included, whatever pytest captures.
CALIBRATION = pytest.StashKey[list[str]]()


@pytest.fixture
def calibration_report(request: pytest.FixtureRequest) -> list[str]:
    return request.config.stash.setdefault(CALIBRATION, [])


def pytest_terminal_summary(
    terminalreporter: object, exitstatus: int, config: pytest.Config
) -> None:
    lines = config.stash.get(CALIBRATION, [])
    if lines:
        terminalreporter.section("equal-quality gate calibration")  # type: ignore[attr-defined]
        for line in lines:
            terminalreporter.write_line(line)  # type: ignore[attr-defined]
