# Everything starts from a fresh clone: `make test` and `make demo` create .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.spyrec-installed

.PHONY: setup test demo bench clean

setup: $(STAMP)

# torch first and pinned exactly: the local CPU wheel; anything else downloads CUDA packages.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) samples/index_demo.py

bench: $(STAMP)
	$(PY) bench/index_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
