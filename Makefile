# kvcore: the README's two commands and a few helpers.
#
#   make demo     install the core (with the `cli`, `plot` and `hf` extras the README uses)
#                 and the five plugins, run the main job (plan the KV cache of Llama-3.1-8B
#                 in 20 GiB), then say how to get the `kvcore` command on PATH
#   make link     put a `kvcore` link to .venv/bin/kvcore into ~/.local/bin (on PATH on
#                 most Linux desktops), so `kvcore` works without activating .venv
#   make test     install everything (test, kernels, dev, plot and ray extras), then run ruff, mypy,
#                 the core's and every plugin's tests, and the packaging checks (six
#                 wheels, each installed into a fresh venv); see scripts/run_tests.py
#   make wheels   build the six wheels into dist/
#   make bench    run the CPU benchmarks under benchmarks/
#
# Needs make and Python 3.10+.  Run outside a virtual environment, the targets create
# .venv and install there (PEP 668 system Pythons refuse pip install); inside one, there.
# Variables: PYTHON (default python3), PYTEST_ARGS (extra pytest arguments for every
# pytest stage, e.g. PYTEST_ARGS='-m "not slow"' skips the packaging checks' tests),
# KVCORE_TEST_WORKERS (test processes per pytest stage, pytest-xdist; default the CPU
# count, at most 4; 1: one process).
# pip takes torch==2.13.0 (CPU) from the machine's local wheel through pip's configured
# find-links; the kernels extra admits it (torch>=2.4,<2.15).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
# Outside a virtual environment (a system Python refuses `pip install` under PEP 668) the
# targets create .venv with $(PYTHON) (3.10+ needed) and use it; inside one they use it.
IN_VENV := $(shell $(PYTHON) -c 'import sys; print(int(sys.prefix != sys.base_prefix))' 2>/dev/null || echo 1)
BASE_PYTHON := $(PYTHON)
ifeq ($(IN_VENV),0)
override PYTHON := .venv/bin/python
VENV := .venv/bin/python
endif
PIP := $(PYTHON) -m pip
PLUGINS := mla mamba turboquant rswa kpool
# the directory pip puts console scripts in (the `kvcore` command)
# when make started (seconds since the epoch): run_tests.py reports the wall time since
STARTED := $(shell date +%s)
SCRIPTS_DIR = $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("scripts"))')

export PIP_ROOT_USER_ACTION := ignore
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help demo install install-test test lint typecheck unit packaging vllm wheels bench link

help:
	@echo "make demo    # set up and plan Llama-3.1-8B's KV cache in 20 GiB"
	@echo "make link    # put the kvcore command into ~/.local/bin"
	@echo "make test    # set up everything and run every check and test"
	@echo "make wheels  # build the six wheels into dist/"
	@echo "make bench   # run the CPU benchmarks"

.venv/bin/python:
	@$(BASE_PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "kvcore needs Python 3.10+, this is " + sys.version.split()[0])'
	$(BASE_PYTHON) -m venv .venv

install: $(VENV)
	$(PIP) install -q -e ".[cli,plot,hf]" $(foreach p,$(PLUGINS),-e plugins/$(p))

demo: install
	"$(SCRIPTS_DIR)/kvcore" plan llama-3.1-8b --kv-cache-memory 20GiB --max-model-len 8192
	@echo
	@if [ "$(IN_VENV)" = "0" ]; then \
	  echo "kvcore is installed in .venv: run  source .venv/bin/activate  (then kvcore ...),"; \
	  echo "or call .venv/bin/kvcore directly, or  make link  to put kvcore into ~/.local/bin"; \
	else \
	  echo "kvcore is installed in the active virtual environment ($(SCRIPTS_DIR)/kvcore)"; \
	fi

link: install
	mkdir -p "$(HOME)/.local/bin"
	ln -sf "$(abspath $(SCRIPTS_DIR))/kvcore" "$(HOME)/.local/bin/kvcore"
	@case ":$$PATH:" in *":$(HOME)/.local/bin:"*) echo "kvcore -> $(HOME)/.local/bin/kvcore";; \
	  *) echo "linked $(HOME)/.local/bin/kvcore; add $(HOME)/.local/bin to PATH to use it";; esac

install-test: $(VENV)
	$(PIP) install -q -c scripts/constraints.txt -e ".[cli,test,kernels,dev,plot,ray]" \
		$(foreach p,$(PLUGINS),-e "plugins/$(p)[test,kernels]")

test: install-test
	$(PYTHON) scripts/run_tests.py --started $(STARTED)

# single stages (after `make install-test`)
lint:
	$(PYTHON) scripts/run_tests.py --only ruff
typecheck:
	$(PYTHON) scripts/run_tests.py --only mypy
unit:
	$(PYTHON) scripts/run_tests.py --skip packaging
packaging:
	$(PYTHON) scripts/run_tests.py --only packaging
# kvcore-vllm against vLLM 0.32's real Scheduler, in its own venv (.venv-vllm)
vllm:
	$(PYTHON) scripts/run_tests.py --only vllm

wheels:
	$(PYTHON) scripts/build_wheels.py --out dist

# CPU benchmarks (benchmarks/gpu/ needs a GPU machine: python benchmarks/gpu/run_all.py)
bench: install
	$(PYTHON) benchmarks/bench_runtime.py \
		--workload tests/runtime/data/workload-seed0.jsonl --repeat 3
