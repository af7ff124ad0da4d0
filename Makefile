# Two commands for a newcomer: `make demo` and `make test`. Everything else is set-up.
SHELL := /bin/bash
# The first Python 3.10 that really runs (a pyenv shim may exist without the version being selected).
PYTHON310 ?= $(shell for p in $$(command -v python3.10) $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.10.*/bin/python 2>/dev/null | sort -V -r) /usr/bin/python3.10; do \
  "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null && { echo "$$p"; break; }; done)
# Any pip requirement for LiBai: pip's 0.1.1 by default, LiBai main in $(LIBAI_MAIN_VENV), e.g.
#   make demo VENV=.venv-libai-main          (or LIBAI=<path, archive or git+https URL of a LiBai>)
LIBAI ?= $(if $(filter $(LIBAI_MAIN_VENV),$(VENV)),$(LIBAI_MAIN),libai==0.1.1)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.libai_ext-installed
PYTEST_ARGS ?= --durations=25

# LiBai main (0.2.0) at commit 9dcbe3b, in a venv of its own: from its git URL, pinned by commit, or from a
# source archive of that commit when one is given (LIBAI_MAIN_ARCHIVE=<path>) or lies where this project's
# CI keeps one (offline: no git URL needed there).
LIBAI_MAIN_COMMIT := 9dcbe3b281c98ba9a3bd192495bef42570095336
LIBAI_MAIN_GIT := git+https://github.com/Oneflow-Inc/libai.git@$(LIBAI_MAIN_COMMIT)
# Where an archive is looked for: beside this checkout, beside the local checkout it was cloned from, and
# where libai_ext's text-data builder caches the one it downloads (libai_ext/data/text_data.py).
CLONED_FROM := $(patsubst file://%,%,$(shell git config --get remote.origin.url 2>/dev/null))
LIBAI_MAIN_TARBALL := libai-main-$(shell echo $(LIBAI_MAIN_COMMIT) | cut -c1-7).tar.gz
LIBAI_MAIN_ARCHIVE ?= $(firstword $(wildcard $(addsuffix /$(LIBAI_MAIN_TARBALL),../shared/vendor \
  $(CLONED_FROM)/../shared/vendor $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/libai_ext)))
LIBAI_MAIN ?= $(or $(LIBAI_MAIN_ARCHIVE),$(LIBAI_MAIN_GIT))
LIBAI_MAIN_VENV ?= .venv-libai-main
# What depends on the LiBai line, run on LiBai main: compat branches, pairing with LiBai's real loader and
# sampler shards, stage-0-only loading, the batch guard, evaluation padding, exact
# and elastic resume, data position, initial weights, the train_net swap, graph mode, the global batch mixup's keys,
# LiBai's own layers and model-zoo configs (their text data built with LiBai's preprocess tool),
# committed checkpoints, preemption, the config-key guard (LiBai's keys are read from the installed LiBai; LiBai
# main's own configs are checked there), LiBai main's own configs with the plugin's trainer line, every random op
# inside a forward and LiBai main's projects run by their own scripts. One pytest session runs the quick tier of
# these and of LIBAI_MAIN_LONG_TESTS, and the long tests of LIBAI_MAIN_LONG_TESTS only (--long-tier-file): LiBai's
# whole model zoo on every layout against 1 rank, one iteration of each of LiBai main's own configs, the demo's
# exact resume (plugin and stock) and the projects; a quick case whose run a long fixture of its file holds reads
# it there. (2,2,2) on LiBai main: the pairing's quick case with LiBai's real loader; resume on another layout:
# 1 rank -> tp2 x pp2 (quick); (2,2,2) resumed on 1 rank and first-stage-only loading on (2,2,2): 0.1.1's.
# On 0.1.1 only: what LiBai main's projects hold there (accumulation with token-averaged losses: Llama's and
# Baichuan's 8 micro-batches; masking inside a forward: MAE's; flowvision's augmentation through a loader: MoCo's
# and MAE's), libai_ext's own commit protocol killed at each phase, and what runs libai_ext and OneFlow alone
# (seeding, launcher lifetime, the GPU host's device calls, test_random_ops.py's 4-rank draws, libai_ext's stochastic
# layers on user placements and the global mixup on layouts: LiBai main's zoo runs its dropouts, drop-paths and
# mixup on every layout).
LIBAI_MAIN_TESTS ?= tests/test_compat.py tests/test_environment.py tests/test_batch_errors.py \
  tests/test_pairing.py tests/test_stage0_loading.py \
  tests/test_batch_check.py tests/test_evaluation.py tests/test_resume.py tests/test_elastic_resume.py \
  tests/test_data_resume.py tests/test_param_init.py tests/test_train_net.py tests/test_graph.py \
  tests/test_global_mixup.py \
  tests/test_text_data.py tests/test_compat_libai_zoo.py tests/test_libai_zoo.py tests/test_libai_zoo_configs.py \
  tests/test_checkpoint_commit.py tests/test_preemption.py \
  tests/test_config_keys.py tests/test_graph_libai.py \
  tests/test_vocab_padding.py tests/test_libai_main_configs.py tests/test_random_ops.py \
  tests/test_libai_projects.py \
  tests/test_patch_registry.py
LIBAI_MAIN_LONG_TESTS ?= tests/test_zoo_equivalence.py \
  tests/test_libai_main_configs.py tests/test_resume.py tests/test_libai_projects.py \
  tests/test_patch_registry.py

.PHONY: setup setup-libai-main demo test test-all test-libai-main clean-venv

setup: $(STAMP)

# The stamp depends on what the install reads (the project files and the host kernel's source): a second
# `make setup` on a ready venv does nothing.
$(STAMP): pyproject.toml setup.py libai_ext/random/_counter_kernel.c $(wildcard libai_ext/random/keyed_op/*.*)
	@if [ -z "$(PYTHON310)" ] || ! "$(PYTHON310)" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then \
	  echo "make setup: Python 3.10 is required (oneflow 0.9.0 has no wheels for newer Pythons)." >&2; \
	  echo "  Install it (e.g. 'pyenv install 3.10' or 'apt-get install python3.10 python3.10-venv')," >&2; \
	  echo "  or point at one: make setup PYTHON310=/path/to/python3.10" >&2; \
	  exit 1; fi
	test -x $(PY) || "$(PYTHON310)" -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=23"
	# libai's setup.py imports pybind11 and numpy at build time, so they come first.
	$(PY) -m pip install -q pybind11 wheel numpy==1.23.5
	$(PY) -m pip install -q oneflow==0.9.0 numpy==1.23.5
	$(PY) -m pip install -q --no-build-isolation "$(LIBAI)" flowvision==0.1.0 numpy==1.23.5
	# The `cpu` extra (cuDNN 8 / cuBLAS 11 wheels) only where the host lacks those libraries: oneflow finds
	# the wheels through its RPATH, which would also win over a CUDA host's own libraries.
	$(PY) -m pip install -q --no-build-isolation -e ".[dev$$(ldconfig -p | grep -q 'libcudnn.so.8 ' \
	  && ldconfig -p | grep -q 'libcublas.so.11 ' || echo ',cpu')]"
	# The keyed-dropout op is built against an importable OneFlow: with the `cpu` extra, only once it is installed.
	$(PY) -m libai_ext.random.keyed_op.build
	$(PY) -c "import libai_ext, oneflow, libai; print('libai_ext environment ready: oneflow', oneflow.__version__)"
	touch $(STAMP)

# The main job: a 2-stage pipeline on 2 CPU ranks with ConsistentBatchTrainer (a few minutes).
DEMO_ARGS ?=
DEMO_OUTPUT ?= output/demo_pipeline_cpu
demo: setup
	timeout 1800 $(PY) -m oneflow.distributed.launch --nproc_per_node 2 \
	  tools/train_net.py --config-file configs/demo_pipeline_cpu.py train.output_dir=$(DEMO_OUTPUT) $(DEMO_ARGS)
	@$(PY) tools/print_run.py $(DEMO_OUTPUT)

# The quick tier (every guarantee at small scale) and the long matrix on top of it.
test: setup
	$(PY) -m pytest tests -m "not long" $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest tests $(PYTEST_ARGS)

# For a person with GPUs: libai_ext's CUDA paths on this machine, one table row per check (its rows and its
# time limit: tools/gpu_check.py --help, docs/tools.md). Refuses with exit code 2 where OneFlow sees no GPU.
.PHONY: gpu-check
gpu-check: setup
	$(PY) tools/gpu_check.py

# LiBai main's venv, $(LIBAI_MAIN_VENV) (once).
setup-libai-main:
	@[[ -z "$(LIBAI_MAIN_ARCHIVE)" || "$(LIBAI_MAIN_ARCHIVE)" != *.tar.gz ]] || test -f "$(LIBAI_MAIN_ARCHIVE)" || { \
	  echo "make setup-libai-main: no LiBai main archive at $(LIBAI_MAIN_ARCHIVE); set LIBAI_MAIN_ARCHIVE=<path or pip" \
	  "requirement of LiBai main>, or leave it empty for $(LIBAI_MAIN_GIT)" >&2; exit 1; }
	@[[ "$(LIBAI_MAIN)" != "$(LIBAI_MAIN_GIT)" ]] || echo "make setup-libai-main: LiBai main from github.com (no" \
	  "archive found); offline, set LIBAI_MAIN_ARCHIVE=<a source archive of 9dcbe3b>" >&2
	$(MAKE) setup VENV=$(LIBAI_MAIN_VENV) LIBAI=$(LIBAI_MAIN)

# The same code on LiBai main: sets up $(LIBAI_MAIN_VENV) (once), runs the line's tests there.
test-libai-main: setup-libai-main
	$(LIBAI_MAIN_VENV)/bin/python -m pytest $(LIBAI_MAIN_TESTS) $(filter-out $(LIBAI_MAIN_TESTS),$(LIBAI_MAIN_LONG_TESTS)) \
	  $(addprefix --long-tier-file=,$(LIBAI_MAIN_LONG_TESTS)) $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
