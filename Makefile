# spark-serve developer entry points. `make test` is the README's test command and what CI runs.
SHELL := /bin/bash
VENV := .venv
ENGINE_VENV := .venv-engine
PY := $(VENV)/bin/python

.PHONY: install system promtool engine lint test tiers test-extended unit molecule bench catalogs docs demo testbed-down

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $@

# Debian packages the test bed needs on this machine (Docker engine, debootstrap for the node images), and promtool.
SYSTEM_PACKAGES := docker.io debootstrap rsync curl openssh-client
system: promtool
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

# promtool alone (the alert rules' unit tests), unpacked from Debian's prometheus package: installing the package
# would start a Prometheus service on this machine.
promtool: .tools/bin/promtool

.tools/bin/promtool:
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd "$$tmp" && \
	{ apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; } && \
	dpkg-deb -x prometheus_*.deb root && install -D -m 0755 root/usr/bin/promtool $(CURDIR)/$@

# The real CPU build of vLLM that the engine tests start (tests/engine/install_engine.sh).
engine:
	bash tests/engine/install_engine.sh $(ENGINE_VENV)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/yamllint -s .
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/ansible-lint

unit: install
	$(VENV)/bin/pytest -m "not engine and not playbook and not testbed"

# Everything CI runs: install, lint, then every tier (unit, playbook, real engine, test bed) and, when the machine's
# pace leaves room, one rotating slice of the extended suite and the Molecule scenarios (tests/rotation.py); all of
# them at once: make test-extended, make molecule.
test: install system engine lint
	$(MAKE) tiers

# The test tiers alone (unit, playbook, engine, testbed), for a tree already installed and linted: each timed, two
# test beds built in the background meanwhile, the test-bed tier run as two shards at once (tests/tiers.py).
tiers:
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH SPARK_ENGINE_VENV=$(CURDIR)/$(ENGINE_VENV) $(PY) tests/tiers.py

# The extended test-bed suite, on one test bed (instance 0), after make test: the quad and the fleet (scale), and
# second proofs of paths make test proves (docs/tests.md lists each, why, and its time).
test-extended: install system engine
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH SPARK_ENGINE_VENV=$(CURDIR)/$(ENGINE_VENV) $(VENV)/bin/pytest \
		-m "testbed and extended and not molecule" --durations=20

# Every Molecule scenario (converge, idempotence, verify) on the test bed: about 10 min on 2 idle cores, 24 on 2 busy
# ones. Not in make test: the test bed's prepare stage (tests/testbed/test_prepare.py) converges every one of these
# roles from bare, proves it idempotent and runs its verification, on the pair it serves.
molecule: install system
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/pytest -m molecule --durations=10

# The main job on the built-in two-node test bed: real vLLM CPU engine, TP2 across two test nodes.
demo: install system engine
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) tests/testbed/demo.py

testbed-down: install
	$(PY) tests/testbed/testbed.py down

bench: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) tests/bench/validate_bench.py

# Regenerate roles/*/README.md from each role's meta/argument_specs.yml (a unit test fails on drift).
docs: install
	$(PY) tools/gen_role_readme.py

# Regenerate module_utils/vllm_flags_*.py from each engine version's own parser.
catalogs: engine
	bash tools/gen_flag_catalogs.sh
