# d5's two commands: `make demo` and `make test`. Both set everything up first.
# Only python3, pip and make are needed on the machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch is always pinned: 2.13.0 is a CPU build; anything else downloads gigabytes.
TORCH  := torch==2.13.0
# Plugins that can share one environment (MXNet cannot: it needs numpy 1.23.5).
SHARED_PLUGINS := d5-plugin-numpy d5-plugin-torch d5-plugin-onnxruntime d5-plugin-mpi \
                  d5-plugin-tensorflow d5-plugin-jax d5-plugin-torchdist
STAMP  := $(VENV)/.installed
# The checkers are pinned: a new ruff or mypy release may find new faults in old code.
RUFF_VERSION := 0.17.6
MYPY_VERSION := 2.4.1
NOX_VERSION  := 2026.10.20
# A download cut off halfway is retried and resumed rather than failing the build (pip
# resumes since 25.1; a new venv's own pip may be older).
PIP_VERSION  := 26.3
export PIP_RETRIES ?= 10
export PIP_RESUME_RETRIES ?= 20

.PHONY: dev mxnet demo test lint types bench docs dist clean

dev: $(STAMP) ## .venv with d5core and every shareable plugin, editable

# The native kernels (d5-kernels) build with scikit-build-core and pybind11 from the venv,
# so that an edit of their C++ rebuilds on the next import.
$(STAMP): pyproject.toml $(foreach p,$(SHARED_PLUGINS),plugins/$(p)/pyproject.toml) \
          kernels/pyproject.toml kernels/CMakeLists.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
	    "$(TORCH)" -e ".[test,hf,postgres]" $(foreach p,$(SHARED_PLUGINS),-e "plugins/$(p)[test]") \
	    nox==$(NOX_VERSION) ruff==$(RUFF_VERSION) mypy==$(MYPY_VERSION) \
	    scikit-build-core==0.11.6 pybind11==2.13.6
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
	    --no-build-isolation -e "kernels[test]"
	touch $(STAMP)

# MXNet 1.9.1 imports only beside numpy 1.23.x: it gets an environment of its own, with
# d5, the numpy reference it is validated against and MPI. Its results go to the same
# store as .venv's (`--db`), where `d5 results table` puts them side by side.
MXNET_VENV  := .venv-mxnet
MXNET_BIN   := $(MXNET_VENV)/bin
MXNET_STAMP := $(MXNET_VENV)/.installed
MXNET_PINS  := mxnet==1.9.1 numpy==1.23.5

mxnet: $(MXNET_STAMP) ## .venv-mxnet: d5core, the MXNet plugin, the numpy reference and MPI

$(MXNET_STAMP): pyproject.toml plugins/d5-plugin-mxnet/pyproject.toml \
                plugins/d5-plugin-numpy/pyproject.toml plugins/d5-plugin-mpi/pyproject.toml
	$(PYTHON) -m venv $(MXNET_VENV)
	$(MXNET_BIN)/python -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION)
	$(MXNET_BIN)/python -m pip install --quiet --disable-pip-version-check \
	    $(MXNET_PINS) -e ".[test]" -e "plugins/d5-plugin-numpy[test,customop]" \
	    -e plugins/d5-plugin-mpi -e "plugins/d5-plugin-mxnet[test]"
	touch $(MXNET_STAMP)

# The demo keeps its results in the project, not in the per-user database.
DEMO_DB ?= $(CURDIR)/results/demo.sqlite
# Every run of one `make demo` carries this tag (both environments, same database), so its
# report draws exactly that demo's runs however many earlier demos the database holds.
DEMO_TAG := demo-$(shell date -u +%Y%m%dT%H%M%S)
DEMO_REPORT := results/demo-report.html
# Where every demo step stores its runs, and the tag they carry.
DEMO_STORE = --db $(DEMO_DB) --tag $(DEMO_TAG)

demo: dev mxnet ## the main job: frameworks side by side at levels 0-3 and under load, validated, with intervals, and their report
	$(BIN)/d5 list-plugins --check
	$(MXNET_BIN)/d5 list-plugins --check
	$(BIN)/d5 validate op Gemm --backend torch $(DEMO_STORE)
	$(BIN)/d5 validate op Gemm --backend tensorflow $(DEMO_STORE)
	$(BIN)/d5 validate op Gemm --backend jax $(DEMO_STORE)
	$(MXNET_BIN)/d5 validate op Gemm --backend mxnet $(DEMO_STORE)
	$(MXNET_BIN)/d5 bench op Gemm --backends mxnet --suite cpu-small $(DEMO_STORE)
	$(BIN)/d5 bench op Gemm --backends numpy,torch,tensorflow,jax --suite cpu-small $(DEMO_STORE)
	$(MXNET_BIN)/d5 bench net lenet5 --executors mxnet --batch 32 --processes 3 $(DEMO_STORE)
	$(BIN)/d5 bench net lenet5 --executors numpy,torch,onnxruntime,tensorflow,jax --batch 32 \
	    --processes 3 $(DEMO_STORE)
	$(BIN)/d5 bench net lenet5 --scenario single-stream --min-duration 1 \
	    --executors numpy,torch,onnxruntime,tensorflow,jax $(DEMO_STORE)
	$(MXNET_BIN)/d5 bench net lenet5 --scenario single-stream --min-duration 1 --executors mxnet \
	    $(DEMO_STORE)
	$(BIN)/d5 bench comm --ranks 2 $(DEMO_STORE)
	$(BIN)/d5 run recipes/digits-mlp.toml --set executor=numpy --ranks 2 $(DEMO_STORE)
	$(BIN)/d5 run recipes/digits-mlp.toml --set executor=numpy --repeat 6 $(DEMO_STORE)
	$(BIN)/d5 run recipes/digits-mlp.toml --set executor=torch --repeat 6 $(DEMO_STORE)
	$(BIN)/d5 run recipes/digits-mlp.toml --set executor=tensorflow --set optimizer=tf-momentum \
	    --repeat 6 $(DEMO_STORE)
	$(MXNET_BIN)/d5 run recipes/digits-mlp.toml --set executor=mxnet --set optimizer=mx-momentum \
	    --repeat 6 $(DEMO_STORE)
	$(BIN)/d5 run recipes/digits-mlp.toml --set executor=jax --set optimizer=jax-momentum \
	    --repeat 3 $(DEMO_STORE)
	@echo; echo "== every environment's results, side by side, from $(DEMO_DB) =="
	$(BIN)/d5 results table --last 2 --kind op --db $(DEMO_DB)
	$(BIN)/d5 results table --last 2 --kind net --db $(DEMO_DB)
	$(BIN)/d5 results table --last 27 --kind train --by executor --db $(DEMO_DB)
	@echo; echo "== the report of this demo's runs (tag $(DEMO_TAG)) =="
	$(BIN)/d5 report --tag $(DEMO_TAG) --db $(DEMO_DB) -o $(DEMO_REPORT)
	@echo; echo "report: $(CURDIR)/$(DEMO_REPORT) (figures as PNG and PDF in $(CURDIR)/results/demo-report_figures/)"

test: dev ## every test: one nox session per plugin, core, integration, lint, types
	@rm -rf .reports; mkdir -p .reports
	@$(BIN)/nox --reuse-existing-virtualenvs --no-color; rc=$$?; \
	    $(BIN)/python .ci/junit_summary.py .reports; rs=$$?; \
	    if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$rs

lint: dev
	$(BIN)/ruff check .

types: dev
	$(BIN)/mypy

docs: dev ## regenerate the hook reference from the hookspec docstrings
	$(BIN)/python docs/gen_hook_reference.py

bench: dev mxnet ## the benchmark scripts whose figures go into docs/benchmarks.md
	$(BIN)/python benchmarks/list_plugins_time.py
	$(BIN)/python benchmarks/bus_overhead.py
	$(BIN)/python benchmarks/engine_vs_timeit.py
	$(BIN)/python benchmarks/op_overhead.py
	$(BIN)/python benchmarks/microbatch_memory.py
	$(BIN)/python benchmarks/executor_fairness.py
	$(BIN)/python benchmarks/report_scale.py
	$(BIN)/python benchmarks/train_e2e.py
	$(BIN)/python benchmarks/store_write_cost.py
	$(BIN)/python benchmarks/store_writers.py

dist: ## wheels of d5core and every plugin, into dist/
	$(PYTHON) .ci/build_dist.py --out dist

clean:
	rm -rf $(VENV) $(MXNET_VENV) .nox .reports .pytest_cache .mypy_cache .ruff_cache dist
