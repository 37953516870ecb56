# Sourced by scripts/setup.sh and scripts/test_sanitized.sh: compile through ccache where the
# machine has it, unless XCCL_CCACHE=0: sets CCACHE_CMAKE_ARGS (compiler launchers for the
# core's CMake builds). Paths under the checkout are hashed relative to it (CCACHE_BASEDIR,
# and not the build directory: CCACHE_NOHASHDIR), so a fresh clone elsewhere reuses what
# another clone compiled (113 of the core's 117 objects). The plugin's compiler is found on
# PATH (torch's cpp_extension runs `c++`), so CCACHE_PATH_PREFIX is ccache's directory of
# compiler names, to put first on PATH for that build: its torch-heavy units (minutes of CPU)
# come back from the cache in seconds whenever their text is unchanged.
CCACHE_CMAKE_ARGS=()
CCACHE_PATH_PREFIX=""
if [ "${XCCL_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  CCACHE_CMAKE_ARGS=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
                     -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  for d in /usr/lib/ccache /usr/lib64/ccache /usr/local/lib/ccache; do
    if [ -x "$d/c++" ]; then CCACHE_PATH_PREFIX="$d:"; break; fi
  done
else
  CCACHE_CMAKE_ARGS=(-UCMAKE_CXX_COMPILER_LAUNCHER -UCMAKE_C_COMPILER_LAUNCHER
                     -UCMAKE_CUDA_COMPILER_LAUNCHER)
fi
