PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo install bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	$(PY) -m skfilter.kernels
	touch $(STAMP)

install: $(STAMP)

# pytest exit code 5 (no tests collected) is a failure here, as any non-zero code.
test: $(STAMP)
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q --doctest-modules skfilter

demo: $(STAMP)
	$(PY) -m skfilter.benchmarks demo

bench: $(STAMP)
	$(PY) -m skfilter.benchmarks speed

clean:
	rm -rf $(VENV) build *.egg-info
