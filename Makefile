# Two commands: `make run` (the product on this machine) and `make test` (the whole suite).
# `FLEET_LAB=N make run`: N lab hosts (bin/lab-hosts), onboarded with 4 demo machines each.
# The system's Python where there is one: the control plane's own user (not root) must be able to
# run the virtualenv `make run` starts it from (a pyenv under /root it could not).
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROVIDER ?= local

.PHONY: run test venv bench check clean host images

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# What this computer needs for real nodes and every test: Debian's packages and the node uid
# ranges, installed once (bin/host-setup says so, or says in one line why it cannot).
host:
	@bin/host-setup

# The machine images real nodes boot from (docs/nodeops.md, "Images"): `base`, and `pytorch`
# (base plus PyTorch), each built with mmdebstrap the first time (a few minutes each; it says
# so), then taken from this computer's cache until its recipe changes. Only where real nodes
# can run (root).
images: $(STAMP) host
	@if [ "$$(id -u)" = 0 ]; then for image in base pytorch; do \
		$(PY) -m clusters.providers.local.images build $$image || exit 1; done; fi

run: $(STAMP) host images
	DEBUG=1 $(PY) manage.py migrate --noinput
	DEBUG=1 $(PY) manage.py seed_demo --provider $(PROVIDER)
	@if [ -n "$(FLEET_LAB)" ]; then DEBUG=1 $(PY) manage.py fleet_lab $(FLEET_LAB); fi
	DEBUG=1 DEFAULT_PROVIDER=$(PROVIDER) $(PY) -m config.stack

test: $(STAMP) host images
	$(PY) -m pytest $(PYTEST_ARGS)

# Lint, types and Django's own checks: CI runs this before the tests.
check: $(STAMP)
	$(VENV)/bin/ruff check .
	DEBUG=1 $(VENV)/bin/mypy
	DEBUG=1 $(PY) manage.py check
	SECRET_KEY=check-deploy-$$(date +%s)-not-a-real-secret-but-long-enough-for-the-check ALLOWED_HOSTS=clusters.runcrate.example NODE_SECRETS_KEY=$$($(PY) -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())') $(PY) manage.py check --deploy --fail-level WARNING

# Benchmarks print figures; they assert nothing. Every bench/*.py runs (bench/_*.py are their
# shared helpers), each in a PostgreSQL database of its own made from DATABASE_URL's server.
BENCHES := $(filter-out bench/_%,$(sort $(wildcard bench/*.py)))

bench: $(STAMP) host images
	@status=0; for script in $(BENCHES); do \
		echo "== $$script"; DEBUG=1 $(PY) $$script || status=1; \
	done; exit $$status

clean:
	rm -rf var staticfiles .pytest_cache
