PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# PyTorch's own wheel index for torch: the CPU build by default, so that a machine without a GPU never
# downloads the multi-GB CUDA build that PyPI serves on Linux. For an NVIDIA GPU:
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: test demo install bench docs clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0 --index-url $(TORCH_INDEX) --retries 1
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

$(DOCS_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,docs]"
	touch $(DOCS_STAMP)

# The HTML documentation in doc/_build/html: the API reference, the user guide and benchmark pages,
# and the example gallery (every script of examples/ is run). Warnings are errors. The API stubs are
# regenerated each time, so that a name removed from doc/api.rst leaves no stale page behind.
docs: $(DOCS_STAMP)
	rm -rf doc/generated
	OMP_NUM_THREADS=1 $(PY) -m sphinx -W --keep-going -b html doc doc/_build/html

clean:
	rm -rf $(VENV) build *.egg-info
