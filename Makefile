# ComputeHub: `make demo` runs the platform on 127.0.0.1, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: test demo bench install postgres clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Re-installs only when pyproject.toml changed (the stamp carries its checksum).
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[test,postgres]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# The suite starts its own PostgreSQL server; install the server binaries if the machine lacks them.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql)

test: install postgres
	$(PY) -m pytest -q -p no:cacheprovider

demo: install
	$(VENV)/bin/computehub demo

bench: install
	$(PY) bench/scale.py
	$(PY) bench/replay.py

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
