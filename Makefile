# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python

$(VENV)/.installed-%: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$*]"
	touch $@

.PHONY: demo test bench bench-spark
demo: $(VENV)/.installed-test,spark
	$(PY) -m lamina.demo

test: $(VENV)/.installed-test,spark
	$(PY) -m pytest -n 2 --dist loadgroup -q

bench: $(VENV)/.installed-bench
	$(PY) bench/run.py

bench-spark: $(VENV)/.installed-test,spark
	$(PY) bench/spark_bench.py
