# Two commands: `make run` (the product on this machine) and `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROVIDER ?= local

.PHONY: run test venv bench check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	DEBUG=1 $(PY) manage.py migrate --noinput
	DEBUG=1 $(PY) manage.py seed_demo --provider $(PROVIDER)
	DEBUG=1 DEFAULT_PROVIDER=$(PROVIDER) $(PY) manage.py runstack

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

check: $(STAMP)
	DEBUG=1 $(PY) manage.py check
	SECRET_KEY=check-deploy-$$(date +%s)-not-a-real-secret-but-long-enough-for-the-check ALLOWED_HOSTS=clusters.runcrate.example $(PY) manage.py check --deploy --fail-level WARNING

# Benchmarks print figures; they assert nothing. Every bench/*.py runs (bench/_*.py are their
# shared helpers), each in a PostgreSQL database of its own made from DATABASE_URL's server.
BENCHES := $(filter-out bench/_%,$(sort $(wildcard bench/*.py)))

bench: $(STAMP)
	@status=0; for script in $(BENCHES); do \
		echo "== $$script"; DEBUG=1 $(PY) $$script || status=1; \
	done; exit $$status

clean:
	rm -rf var staticfiles .pytest_cache
