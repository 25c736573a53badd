# The two entry points of the README:
#   make demo   installs what is missing, builds, and runs the main job on data/clothing-mini
#   make test   installs what is missing, builds, and runs every C++ and Python test
# Afterwards .venv/bin/stoker is the CLI and .venv/bin/python -c "import stoker" works.

SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
BUILD := build/py
APT_PACKAGES := build-essential cmake ninja-build pkg-config git \
	libabsl-dev libjpeg62-turbo-dev libturbojpeg0-dev libtbb-dev libcurl4-openssl-dev \
	nlohmann-json3-dev libcli11-dev libfmt-dev libzstd-dev libxxhash-dev libgtest-dev
PIP_PACKAGES := "scikit-build-core>=0.10" "nanobind>=2.0" "numpy>=1.21" "pytest>=7" "moto[server]"
SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo)

.PHONY: all deps venv build demo test test-cpp test-python clean

all: build

# System packages: installed only when some are missing.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  echo "installing with apt-get:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(VENV)/.ready: Makefile | deps
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q $(PIP_PACKAGES)
	touch $@

venv: deps $(VENV)/.ready

# Builds the core, the CLI, the tests and the Python module (one CMake build
# in build/py, incremental), and installs the CLI and module into the venv.
build: venv
	$(VENV)/bin/python -m pip install -q --no-build-isolation --no-deps .
	@test -x $(VENV)/bin/stoker

demo: build
	$(VENV)/bin/python examples/demo.py

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j2

test-python: build
	$(VENV)/bin/python -m pytest python/tests -q

test: test-cpp test-python

clean:
	rm -rf build out $(VENV)
