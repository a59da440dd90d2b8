# Two commands on a fresh machine:  `make train`  and  `make test`.
# Both create (or reuse) the virtual environment .venv from the pinned stack.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
ROOT ?= runs/cartpole_swingup
# Empty: train_eval picks the default task's configuration for this machine
# (a GPU: full size; a CPU: cartpole_fast.gin to 100k environment steps) and says so.
GIN ?=
ARGS ?=
PYTEST_ARGS ?=

.PHONY: venv train test test-fast bench clean-venv

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[dmc,carla,highway,dev]'
	touch $(STAMP)

venv: $(STAMP)

# tcmalloc, where installed (Debian: libtcmalloc-minimal4), made the default train step about 5%
# faster in interleaved runs (python -m bench.allocator_ab); `make train TCMALLOC=` turns it off.
TCMALLOC ?= $(wildcard /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4)
# The threshold silences tcmalloc's "large alloc" notes (replay checkpoints reach GBs).
RUN_ENV := $(if $(TCMALLOC),LD_PRELOAD=$(TCMALLOC) TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD=68719476736)

# The main job: latent SAC on DeepMind Control cartpole swing-up from pixels.
train: $(STAMP)
	$(RUN_ENV) $(PY) train_eval.py --root_dir=$(ROOT) $(if $(GIN),--gin_file=$(GIN)) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest tests $(PYTEST_ARGS)

# The edit-test loop: leaves out tests marked slow (other processes: train_eval, servers,
# collectors; or > ~20 s). `make test` still runs them all.
test-fast: $(STAMP)
	$(PY) -m pytest tests -m "not slow" $(PYTEST_ARGS)

# Benchmark suite: one JSON line per figure, writes docs/benchmarks/<CPU kind>.md and the
# docs/benchmarks.md index (BENCH_ARGS=--quick: smoke test).
BENCH_ARGS ?=
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

clean-venv:
	rm -rf $(VENV)
