# Two commands set everything up on a fresh machine:
#   make run    create .venv, install pinned dependencies, run the embedded default
#   make test   create .venv, install pinned dependencies, run the test suite
# and for the inner loop:
#   make test-fast  the suite without the tests marked slow (real Snakemake, SLURM, finetune
#                   processes): a couple of minutes; `make test` still runs everything
# and one more for the file readers:
#   make fuzz   the property-based tests of every file reader, with many random examples
#               (FUZZ_EXAMPLES per test; `make test` runs a short, fixed set of them)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SNAKEMAKE_ARGS ?=
FUZZ_EXAMPLES ?= 5000

.PHONY: run test test-fast fuzz lint dry-run clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake $(SNAKEMAKE_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

fuzz: $(STAMP)
	OODCORR_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/test_fuzz.py --hypothesis-profile=fuzz \
		--hypothesis-show-statistics $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/snakemake --lint

dry-run: $(STAMP)
	$(BIN)/snakemake -n $(SNAKEMAKE_ARGS)

clean:
	rm -rf results logs .snakemake report.html .hypothesis
