# syntax=docker/dockerfile:1
# The mempo binaries in a runtime image: `make image` (IMAGE=name:tag) builds it.
#
# Stage "build" compiles bin/ exactly as `make build` does on a workstation: the repo's own
# build/libtorch.sh fetches the pinned libtorch 2.11.0 (the CPU parts of the torch==2.11.0
# wheel, sha256-checked) and build/go.sh compiles against it. libtorch goes to
# /opt/mempo/libtorch-2.11.0, and the binaries' RUNPATH names that directory.
#
# The runtime image holds the six binaries and the five libraries they load from that
# libtorch (libc10, libtorch_cpu, its bundled libgomp, and the CUDA runtime and CUPTI stubs
# that libtorch_cpu NEEDs even without a GPU) at the same path: no Go, no compiler, no
# headers. pipelines/k8s_test.go (TestDockerfile) checks that these lists are the binaries
# cmd/ builds and the libraries `ldd bin/mempo` resolves from libtorch.
#
# This is the CPU build: --device cuda needs a CUDA build (make build CUDA=1) and NVIDIA's
# libraries beside it, which this image does not carry.

ARG GO_VERSION=1.26.8
ARG DEBIAN=bookworm

FROM golang:${GO_VERSION}-${DEBIAN} AS build
# python3-pip: build/libtorch.sh downloads the pinned wheels with pip; unzip extracts
# them; curl fetches Gloo's headers (build/gloo.sh); g++ compiles gotch's C++ layer.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip unzip curl g++ make binutils \
 && rm -rf /var/lib/apt/lists/*
ENV MEMPO_CACHE=/opt/mempo GOFLAGS=-buildvcs=false
WORKDIR /src
# libtorch first: its layer (about 560 MB downloaded) is reused until build/ changes.
COPY build/ build/
RUN build/libtorch.sh && build/gloo.sh
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# REVISION: what --version and every manifest record of the code (the context has no .git).
ARG REVISION=unknown
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make build REVISION=${REVISION} CODE_VERSION=${REVISION} \
 && ! ldd bin/mempo bin/mempo-rollout bin/mempo-logprob bin/mempo-update bin/mempo-score bin/mempo-advantage | grep 'not found'

FROM debian:${DEBIAN}-slim AS runtime
COPY --from=build /opt/mempo/libtorch-2.11.0/lib/libc10.so \
                  /opt/mempo/libtorch-2.11.0/lib/libtorch_cpu.so \
                  /opt/mempo/libtorch-2.11.0/lib/libgomp.so.1 \
                  /opt/mempo/libtorch-2.11.0/lib/libcudart.so.13 \
                  /opt/mempo/libtorch-2.11.0/lib/libcupti.so.13 \
                  /opt/mempo/libtorch-2.11.0/lib/
COPY --from=build /src/bin/mempo \
                  /src/bin/mempo-rollout \
                  /src/bin/mempo-logprob \
                  /src/bin/mempo-update \
                  /src/bin/mempo-score \
                  /src/bin/mempo-advantage \
                  /usr/local/bin/
# Fails the build if a library the binaries need is missing from the image.
RUN mempo --version
RUN useradd --create-home --uid 1000 mempo
USER mempo
WORKDIR /home/mempo
CMD ["mempo", "--help"]
