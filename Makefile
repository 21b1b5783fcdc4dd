# Two commands matter: `make demo` and `make test`. Each builds .venv by itself on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint demo schemas clean bench

# Python may cache bytecode here (__pycache__ is ignored by git, the function archive and the image build):
# every process the tests and the demo start then skips compiling the project's modules.
unexport PYTHONDONTWRITEBYTECODE

# uv installs the pinned requirements in seconds where pip takes ~100 s here (most of it
# torch). It reads no pip configuration, so pip's find-links (where this machine keeps the CPU torch wheel) is
# handed on. It compiles the bytecode of .venv as it installs (--compile-bytecode; ~35 CPU-s): left to the first
# import, the suite's many processes starting at once each compiled torch's modules before any had cached them
# (a fresh clone's `make test` took 45 s longer; bench/RESULTS.md).
UV_FIND_LINKS ?= $(PIP_FIND_LINKS)
export UV_FIND_LINKS

$(STAMP): requirements.txt requirements-dev.txt trainer/requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q "$$(grep -m1 '^uv==' requirements-dev.txt)"
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -r requirements-dev.txt
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e .
	touch $@

# The main job on the embedded default: the whole system on this machine, a dataset landing, a 2-node
# DDP job training on it, every event shown; the stack is stopped at the end.
demo: $(STAMP)
	$(VENV)/bin/trainctl demo

# Two workers, one per core, each with its own emulators; a test file stays on one worker (its module fixtures).
# The type check runs beside the suite (on a fresh clone it has no cache and takes a core for ~20 s); its
# report is printed after the tests', and either failing fails the target.
test: $(STAMP) chromium
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy > $(VENV)/mypy.out 2>&1 & mypy=$$!; \
	$(VENV)/bin/pytest -n 2 --dist loadfile; tests=$$?; \
	wait $$mypy; typed=$$?; cat $(VENV)/mypy.out; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# The console's browser tests (tests/browser, issue 45) drive Debian's chromium through Playwright. Installed here
# where it is missing (as root, as on this project's machines; the package index is fetched only when the install
# fails without it); otherwise says what to install. Silent when chromium is there.
.PHONY: chromium
chromium:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; \
	  else \
	    echo "the browser tests need Debian's chromium: run 'apt-get install chromium' as root" >&2; exit 1; \
	  fi; }

# The performance goals of issue 8 on the emulators and the local JobService; each script appends its figures,
# with the machine, load and commit, to bench/RESULTS.md. Not part of `make test` (tests never time anything).
bench: $(STAMP)
	$(PY) bench/cold_start.py --profile
	$(PY) bench/controller_load.py
	$(PY) bench/reconcile_scale.py
	$(PY) bench/reconcile_sweep.py
	$(PY) bench/report_listing.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint trainer/Dockerfile

# Regenerate the checked-in JSON Schema files from the pydantic models.
schemas: $(STAMP)
	$(PY) -m schemas.export

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Terraform checks without a cloud (the Google provider cannot be downloaded here, so no validate):
# formatting, checkov in its own venv, and the tests that parse the HCL (also part of `make test`).
CHECKOV_VENV ?= .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

$(CHECKOV_STAMP): terraform/requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || python3 -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q -r terraform/requirements-checkov.txt
	touch $@

.PHONY: tf-check
tf-check: $(STAMP) $(CHECKOV_STAMP)
	@command -v terraform >/dev/null || { echo "tf-check needs terraform >= 1.9 on PATH" >&2; exit 1; }
	terraform fmt -check -recursive -diff terraform/
	$(CHECKOV_VENV)/bin/checkov --directory terraform --framework terraform --quiet --compact --skip-download
	$(VENV)/bin/pytest tests/terraform
