# Two commands matter: `make demo` and `make test`. Each builds .venv by itself on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint demo schemas clean

$(STAMP): requirements.txt requirements-dev.txt trainer/requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint trainer/Dockerfile

# Regenerate the checked-in JSON Schema files from the pydantic models.
schemas: $(STAMP)
	$(PY) -m schemas.export

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
