# Everything starts from a fresh clone: `make test` and `make demo` create .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.spyrec-installed

PIP    := $(PY) -m pip --disable-pip-version-check

.PHONY: setup test demo bench snapshots opinfo random-sweep reference symbolic constraints clean

setup: $(STAMP)

# torch first and pinned exactly: the local CPU wheel; anything else downloads CUDA packages.
# Everything else at the exact versions of constraints.txt (pyproject.toml has the ranges).
# Then spyrec's bytecode, as a regular install has it (an editable one does not, and where
# PYTHONDONTWRITEBYTECODE is set every spyrec process compiled its ~110 modules again: 0.2-0.3 s
# of each command); a module edited later is recompiled in memory, as before.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e '.[test,models]'
	$(PY) -m compileall -q spyrec > /dev/null
	touch $(STAMP)

# Rewrite constraints.txt from what .venv holds (after an intended upgrade; DEVELOPERS.md).
constraints: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; \
	  $(PIP) freeze --exclude-editable | grep -v -i '^pyflakes==' | sed 's/+cpu$$//'; } \
	  > constraints.txt.new
	mv constraints.txt.new constraints.txt

# The suite as CI runs it (tests/run_suite.py, DEVELOPERS.md "Test targets"): progress lines
# at once (SPYREC_PROGRESS_DELAY=0), the simulator on 7 worker threads, then its chunked tests
# again on 1 (SPYREC_SIM_THREADS=1), as parallel pytest processes, one per core (at least 2).
test: $(STAMP)
	$(PY) -m tests.run_suite

DEMO := build/demo
demo: $(STAMP)
	$(PY) samples/export.py mlp_fp16 $(DEMO)
	$(VENV)/bin/spyrec compile $(DEMO)/mlp_fp16.pt2 -o $(DEMO)/out
	$(VENV)/bin/spyrec run $(DEMO)/out --inputs $(DEMO)/mlp_fp16.npz --check --report
	cat $(DEMO)/out/report.txt
	@if $(PY) -c "import transformers" 2>/dev/null; then \
	  $(PY) samples/granite.py $(DEMO)/granite && \
	  $(VENV)/bin/spyrec compile $(DEMO)/granite/granite_prefill.pt2 -o $(DEMO)/granite/prefill && \
	  $(VENV)/bin/spyrec run $(DEMO)/granite/prefill --inputs $(DEMO)/granite/granite_prefill.npz --check && \
	  $(VENV)/bin/spyrec compile $(DEMO)/granite/granite_decode.pt2 -o $(DEMO)/granite/decode && \
	  $(VENV)/bin/spyrec run $(DEMO)/granite/decode --inputs $(DEMO)/granite/granite_decode.npz --check; \
	else echo "transformers is not installed: skipping the Granite sample"; fi

# Every OpInfo sample of every lowered op, fp32 and fp16 (tests/opinfo; a few minutes).
opinfo: $(STAMP)
	$(PY) -m tests.opinfo.sweep --refused

# 2,000 seeded random programs (tests/differential/random_sweep.py; ~15 minutes): passed,
# refused (grouped by reason) and failed, with the seed that replays each failure.
random-sweep: $(STAMP)
	$(PY) -m tests.differential.random_sweep --count 2000

# The reference's published matmul at full size (M512 K4096 N12800; 10-20 s, 1.7 GB of RAM).
reference: $(STAMP)
	SPYREC_FULL_REFERENCE=1 $(PY) -m pytest -q -s tests/sim/test_reference_bundles.py

# Issue 30's programs at every length it names, the 2,048-token maximum included (~2 min).
symbolic: $(STAMP)
	SPYREC_SYMBOLIC_MAX=1 $(PY) -m pytest -q tests/sim/test_symbolic_models.py

snapshots: $(STAMP)
	SPYREC_UPDATE_SNAPSHOTS=1 $(PY) -m pytest -q tests/snapshots

bench: $(STAMP)
	$(PY) bench/index_bench.py
	$(PY) bench/compile_time.py
	$(PY) bench/sim_vs_eager.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
