# The two set-up commands of the README, and friends.
.PHONY: run run-once test bench docs lint mutants clean

STATE ?= $(CURDIR)/nova-lite-state

# A two-host cluster on the embedded default (SQLite file, fake driver), in
# $(STATE)/demo-cluster: two compute services in the background, three
# servers built and one deleted through them, then the services stopped
# (tools/demo-cluster.sh; each run starts a new cluster there).
run:
	@tools/bootstrap.sh core
	@PYTHON="$(CURDIR)/.venv/bin/python" NOVA_LITE_CMD="$(CURDIR)/.venv/bin/nova-lite" \
		tools/demo-cluster.sh "$(STATE)/demo-cluster"

# One pass of the compute service on the embedded default: shows the node,
# its inventories and one admitted and one rejected claim.
run-once:
	@tools/bootstrap.sh core
	@.venv/bin/nova-lite --state-path "$(STATE)" compute --once --demo

# Install everything (Debian packages, drivers, the real-Ironic and Nova venvs) and
# run every test suite; ends with "N passed, N failed, N skipped".
test:
	@tools/bootstrap.sh all
	@tools/run-tests.sh

bench:
	@tools/bootstrap.sh all
	@.venv/bin/python -m bench.run_all --output bench-results.json
	@.venv/bin/python -m bench.summary bench-results.json

# The documentation, in a virtualenv of its own made from doc/requirements.txt
# alone: no apt packages, no libvirt-python, no Ironic.
DOCS_VENV ?= $(CURDIR)/.venv-docs
PYTHON ?= python3

$(DOCS_VENV)/.installed: doc/requirements.txt setup.cfg
	@test -x "$(DOCS_VENV)/bin/python" || $(PYTHON) -m venv "$(DOCS_VENV)"
	@"$(DOCS_VENV)/bin/pip" install -q --disable-pip-version-check -r doc/requirements.txt
	@touch "$@"

docs: $(DOCS_VENV)/.installed
	@"$(DOCS_VENV)/bin/sphinx-build" -n -W -b html doc/source doc/build/html

# Break each guard of the claim path on a copy of the tree and show that the
# tests fail for every one, each mutant against every guard module (make test
# runs each against its own guards only; see doc/source/architecture.rst, "Mutants").
mutants:
	@tools/bootstrap.sh all
	@.venv/bin/python tools/mutants.py --all-guards

# ruff on the whole tree, then mypy on nova_lite (configured in setup.cfg).
lint:
	@tools/bootstrap.sh core
	@test -x .venv/bin/ruff || .venv/bin/pip install -q ruff
	@test -x .venv/bin/mypy || .venv/bin/pip install -q mypy
	@.venv/bin/ruff check nova_lite drivers tests bench tools
	@.venv/bin/mypy

clean:
	rm -rf .venv .venv-* .stestr drivers/*/.stestr doc/build nova-lite-state
