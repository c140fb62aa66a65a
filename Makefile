# The two commands of the README: `make demo` (main job) and `make test` (test suite).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fairseq_shared_installed

.PHONY: demo test test-fast venv sysdeps bench tables gpu-bundle
venv: $(STAMP)
$(STAMP): scripts/setup_env.sh requirements.txt pyproject.toml
	bash scripts/setup_env.sh $(VENV)
	touch $(STAMP)

# System packages for the offline Bible corpus (Debian); prints what it installs.
sysdeps:
	bash scripts/install_system_packages.sh

test: venv sysdeps
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist loadfile --durations=15 tests

# the edit-test loop: every test that starts no fairseq-train, torchrun, corpus build or venv
test-fast: venv
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist loadfile -m "not slow" tests

demo: venv sysdeps
	$(PY) -m harness.main_job

# the GPU check's bundle (docs/gpu.md): gpu_bundle/, not committed; needs PyPI and the venv
gpu-bundle: venv
	BUILD_PYTHON=$(PY) bash scripts/build_gpu_bundle.sh gpu_bundle
