# The two commands: `make run` serves the example project (`make run PORT=8001` for
# another port), `make test` runs the suite.
# `make mutation` runs the mutation testing of the core (the run package and limits.py, through
# tests/mutation/run.py; docs/testing.md): every mutant, or what MUTATION_BUDGET seconds
# allow (`make mutation MUTATION_BUDGET=150`, as CI does).
# `make sql-mutation` mutates the run functions of PostgreSQL (django_llmchat/sql/, through
# tests/mutation/sql.py): DATABASE_URL=postgres://... , SQL_MUTATION_BUDGET seconds.
# Another interpreter or Django goes in its own venv, e.g. (as CI does):
#   make test PYTHON=python3.13 VENV=.venv-py313 DJANGO="Django>=6.0,<7"
PYTHON ?= python3
VENV ?= .venv
# a requirement for Django installed over the project's own lower bound ("" keeps pip's choice)
DJANGO ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

PORT ?= 8000
# debug mode for the local server: runserver serves the static files only then
DJANGO_DEBUG ?= 1

# seconds the mutation campaign may take ("" : no limit)
MUTATION_BUDGET ?=
SQL_MUTATION_BUDGET ?=

.PHONY: run test lint mutation sql-mutation docs benchmarks clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev,postgres,redis]" $(if $(DJANGO),"$(DJANGO)")
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py llmchat_sync_models
	@DJANGO_SUPERUSER_USERNAME=admin DJANGO_SUPERUSER_PASSWORD=admin DJANGO_SUPERUSER_EMAIL=admin@example.com \
		$(BIN)/python manage.py createsuperuser --noinput >/dev/null 2>&1 || true
	@echo ""
	@echo "  Chat:   http://127.0.0.1:$(PORT)/         user: admin   password: admin"
	@echo "  Admin:  http://127.0.0.1:$(PORT)/admin/   API: http://127.0.0.1:$(PORT)/api/docs/"
	@echo ""
	DJANGO_DEBUG=$(DJANGO_DEBUG) $(BIN)/python manage.py runserver 127.0.0.1:$(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check django_llmchat tests example_project benchmarks

mutation: $(STAMP)
	MUTATION_BUDGET=$(MUTATION_BUDGET) $(BIN)/python tests/mutation/run.py

sql-mutation: $(STAMP)
	SQL_MUTATION_BUDGET=$(SQL_MUTATION_BUDGET) $(BIN)/python tests/mutation/sql.py

docs: $(STAMP)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf .venv .venv-py313 site mutants db.sqlite3 db.sqlite3-shm db.sqlite3-wal
