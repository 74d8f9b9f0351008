"""ON THE GPU NODE (or anywhere): can this Python import what `vllm serve` / `bench serve` need?

    python3 scripts/gpu/serving_imports.py [MODULE...]

Default modules (DEFAULT below): the two the harness's serving step runs through
`python -m harness.modes.serving.device.vllm_cli` (`vllm.entrypoints.cli.main` -> `serve` /
`bench serve`),
`vllm.entrypoints.openai.api_server` and `vllm.benchmarks.serve`, plus the CLI modules and what
`vllm serve` imports only once it starts (the API routers of build_app(), uvicorn's HTTP protocol
and event loop, the multipart form parser).

One `serving-imports:` line per module on stdout, then a summary line:
    serving-imports: OK      vllm.entrypoints.openai.api_server
    serving-imports: MISSING vllm.benchmarks.serve needs uvicorn, watchfiles
    serving-imports: ERROR   vllm.entrypoints.cli.main: ImportError: libfoo.so: cannot open ...
    serving-imports: summary OK | summary MISSING uvicorn watchfiles
A missing module does not stop the search: it is replaced by a stub and the import retried, so
one run names every missing top-level module (up to 40), not only the first. Exit 0 when all
import.

SERVING_IMPORTS_STUB=torch,triton (comma list) stubs those names from the start: for a dry run on
a machine without them (a CPU box without torch); never needed on the node.
SERVING_IMPORTS_TRACE=1 prints the traceback of an ERROR. (With torch stubbed, modules that run
torch at import, e.g. vllm.ir via vllm.entrypoints.cli.serve, end in ERROR: expected off the node.)
"""

from __future__ import annotations

import abc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import traceback
import types

DEFAULT = (
    # what `python -m harness.modes.serving.device.vllm_cli serve|bench serve` imports first
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.cli.benchmark.main",
    "vllm.entrypoints.cli.benchmark.serve",
    "vllm.entrypoints.openai.api_server",
    "vllm.benchmarks.serve",
    # imported inside build_app() / register_vllm_serve_api_routers() when the server starts
    "vllm.entrypoints.serve.instrumentator.metrics",
    "vllm.entrypoints.serve.lora.api_router",
    "vllm.entrypoints.serve.profile.api_router",
    "vllm.entrypoints.serve.tokenize.api_router",
    "vllm.entrypoints.openai.models.api_router",
    "vllm.entrypoints.generate.api_router",
    "vllm.entrypoints.scale_out.factories",
    # chosen by uvicorn.Config.load() at run time (by name, not by an import statement)
    "uvicorn.protocols.http.auto",
    "uvicorn.loops.auto",
    "uvicorn.lifespan.on",
    # starlette/fastapi form parsing (fastapi refuses a Form() route without it)
    "python_multipart",
)
MAX_ROUNDS = 40


class _StubMeta(abc.ABCMeta):
    """A class that answers every attribute, call, subscript and `|` with another stub."""

    def __getattr__(cls, name: str):  # type: ignore[no-untyped-def]
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __call__(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: leave the function alone
        return cls

    def __getitem__(cls, key):  # type: ignore[no-untyped-def]
        return cls

    def __or__(cls, other):  # type: ignore[no-untyped-def]
        return cls

    __ror__ = __or__

    def __iter__(cls):  # type: ignore[no-untyped-def]
        return iter((cls, cls))  # `a, b = stub` is the common unpacking

    def _same(cls, *args):  # type: ignore[no-untyped-def]
        return cls

    def _false(cls, *args):  # type: ignore[no-untyped-def]
        return False

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __pow__ = __neg__ = _same
    __and__ = __rand__ = __xor__ = __lshift__ = __rshift__ = __invert__ = _same
    __lt__ = __le__ = __gt__ = __ge__ = _false

    def __int__(cls) -> int:
        return 2**62

    __index__ = __int__

    def __float__(cls) -> float:
        return 1.0


def _stub_class(name: str) -> type:
    return _StubMeta(name, (), {"__module__": "serving_imports_stub"})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a stub package for each stubbed name and everything under it."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.hits: set[str] = set()  # stubbed names served since the last reset

    def covers(self, fullname: str) -> bool:
        return any(fullname == n or fullname.startswith(n + ".") for n in self.names)

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if self.covers(fullname):
            self.hits.update(n for n in self.names if fullname == n or fullname.startswith(n + "."))
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = _StubModule(spec.name)
        module.__path__ = []  # a package: submodules resolve through this finder too
        module.__version__ = "0+stub"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        return None


def _forget() -> None:
    """Drop negative entries (None) left in sys.modules, so a retry looks again."""
    for name in [n for n, m in sys.modules.items() if m is None]:
        del sys.modules[name]


def check(module: str, finder: _StubFinder, preset: set[str]) -> tuple[str, list[str], str]:
    """('OK'|'MISSING'|'ERROR', missing names found on the way, error text)."""
    missing: list[str] = []
    finder.hits.clear()

    def needed() -> list[str]:  # found now, or found by an earlier module and stubbed here
        return missing + sorted(finder.hits - preset - set(missing))

    for _ in range(MAX_ROUNDS):
        try:
            importlib.import_module(module)
            found = needed()
            return ("MISSING" if found else "OK"), found, ""
        except ModuleNotFoundError as exc:
            name = exc.name or ""
            top = name.split(".")[0]
            if not top or finder.covers(name):
                return "ERROR", needed(), f"{type(exc).__name__}: {exc}"
            # A missing submodule of a present package (e.g. vllm.x.y) is a broken bundle, not a
            # missing distribution: report it as is and stub it to go on.
            stub = top if importlib.util.find_spec(top) is None else name
            missing.append(stub)
            finder.names.add(stub)
            _forget()
        except Exception as exc:  # any other failure ends the search for this one
            if os.environ.get("SERVING_IMPORTS_TRACE"):
                traceback.print_exc()
            return "ERROR", needed(), f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return "ERROR", needed(), f"gave up after {MAX_ROUNDS} missing modules"


def main(argv: list[str]) -> int:
    modules = argv or list(DEFAULT)
    finder = _StubFinder()
    finder.names.update(n for n in os.environ.get("SERVING_IMPORTS_STUB", "").split(",") if n)
    sys.meta_path.insert(0, finder)
    preset = set(finder.names)
    all_missing: list[str] = []
    worst = "OK"
    print(f"serving-imports: python {sys.version.split()[0]} at {sys.executable}", flush=True)
    for module in modules:
        if module in sys.modules and all_missing:
            # Imported (with stubs) while an earlier module was checked: its needs are listed there.
            print(f"serving-imports: (seen)  {module}: imported with an earlier one", flush=True)
            continue
        status, missing, error = check(module, finder, preset)
        all_missing += [m for m in missing if m not in all_missing]
        if status == "OK":
            print(f"serving-imports: OK      {module}", flush=True)
        elif status == "MISSING":
            print(f"serving-imports: MISSING {module} needs {', '.join(missing)}", flush=True)
        else:
            extra = f" (missing on the way: {', '.join(missing)})" if missing else ""
            print(f"serving-imports: ERROR   {module}: {error}{extra}", flush=True)
        if status != "OK":
            worst = "ERROR" if status == "ERROR" or worst == "ERROR" else "MISSING"
    note = f" (stubbed from the start: {', '.join(sorted(preset))})" if preset else ""
    if worst == "OK":
        print(f"serving-imports: summary OK{note}", flush=True)
        return 0
    names = " ".join(all_missing) if all_missing else "(no module missing: see the ERROR lines)"
    print(f"serving-imports: summary {worst} {names}{note}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
