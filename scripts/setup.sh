#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian machine (as root) and builds it:
# system packages (with Open MPI and Chromium, which the launcher and browser tests drive),
# torch==2.13.0 (CPU), test tools, the YOLOv5 example's needs (examples/yolov5/requirements.txt:
# PyYAML, Pillow; pycocotools for its mAP cross-check) and transformers + accelerate (the CI sample
# of tests/clients) from PyPI, the core library and its
# tests (CMake, ./build), and the torch_xccl extension (editable install against the
# installed torch). Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(googletest libgtest-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need_apt+=(libcli11-dev)
command -v ip >/dev/null || need_apt+=(iproute2)  # hosts made of network namespaces (tests)
command -v ccache >/dev/null || need_apt+=(ccache)  # compiles seen before are not repeated
command -v clang-format >/dev/null || need_apt+=(clang-format)  # scripts/lint.sh (Debian 12: 14)
command -v clang-tidy >/dev/null || need_apt+=(clang-tidy)  # scripts/tidy.py, in CI's lint
command -v mpirun.openmpi >/dev/null || need_apt+=(openmpi-bin)  # launcher/mpi/run.sh under test
command -v chromium >/dev/null || need_apt+=(chromium)  # tests/python/test_browser.py (headless)
# the libfabric network plugin (csrc/net_libfabric) and its tests
[ -f /usr/include/rdma/fabric.h ] && command -v pkg-config >/dev/null || need_apt+=(libfabric-dev pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

PY=${PYTHON:-python3}
# torch is pinned: the unpinned name pulls a multi-GB CUDA build from the registry.
$PY -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null \
  || $PY -m pip install -q torch==2.13.0
# jsonschema: launcher/k8s/pytorchjob.yaml against its schema. The example's requirements come
# from its own file; the constraint keeps torch where it is.
$PY -m pip install -q -c <(echo torch==2.13.0) "pytest>=7" pytest-timeout pytest-xdist numpy \
  matplotlib ninja jsonschema -r examples/yolov5/requirements.txt
# scripts/lint.sh: pinned, since a newer ruff brings new findings with it.
$PY -m pip install -q ruff==0.14.0
# The CI sample of tests/clients (tests/python/test_clients_sample.py) runs the transformers
# Trainer on accelerate; the constraint keeps torch where it is. scripts/clients.sh installs
# the other clients (pytorch-lightning, DeepSpeed) and runs them all.
$PY -c "import transformers, accelerate" 2>/dev/null \
  || $PY -m pip install -q -c <(echo torch==2.13.0) transformers accelerate

# ccache (XCCL_CCACHE=0 to compile without it): a compile this machine has done before, in
# any checkout (paths are taken relative to the checkout), is taken from ~/.cache/ccache.
source scripts/ccache_env.sh
# compile_commands.json: the flags scripts/tidy.py gives clang-tidy.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  "${CCACHE_CMAKE_ARGS[@]}" >/dev/null
cmake --build build -j"$(nproc)"

# --no-build-isolation: build against the torch installed above, never fetch another.
# XCCL_CORE_BUILD: the plugin bundles the libxccl/libxdev just built in ./build instead of
# configuring and compiling the core a second time.
PATH="$CCACHE_PATH_PREFIX$PATH" XCCL_CORE_BUILD="$PWD/build" MAX_JOBS=${MAX_JOBS:-$(nproc)} \
  $PY -m pip install -q --no-build-isolation -e .
echo "setup: done (core in ./build, torch_xccl installed editable)"
