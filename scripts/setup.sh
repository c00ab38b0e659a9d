#!/usr/bin/env bash
# Installs the Debian packages tightpipe needs (only the missing ones), then configures and builds
# into ${BUILD_DIR:-build}. Safe to run again: a no-op when everything is in place.
#   scripts/setup.sh [packages|build]...   (default: both, in that order; scripts/test.sh runs
#                                           them apart, to make the Python environment meanwhile)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
((${#steps[@]})) || steps=(packages build)
for step in "${steps[@]}"; do
  case $step in
    packages | build) ;;
    *)
      echo "setup.sh: unknown step '$step'; hint: packages or build (no argument: both)" >&2
      exit 2
      ;;
  esac
done

PACKAGES=(
  g++ cmake ninja-build pkg-config git tar
  # Both builds (this one and the sanitizer lane's) compile through ccache and link with lld
  # (CMakeLists.txt).
  ccache lld
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libopenmpi-dev openmpi-bin openssh-client
  # bf16 matmuls (oneDNN, OpenMP runtime). Debian's oneDNN is built with its OpenCL GPU runtime:
  # its CMake package needs the OpenCL headers and library, which libdnnl-dev only recommends.
  libdnnl-dev ocl-icd-opencl-dev
  libarchive-dev
  # Tokenizers: GPT-2's pre-tokenisation pattern (PCRE2), SentencePiece models and its trainer.
  libpcre2-dev libsentencepiece-dev
  libexpat1-dev
  # GPU traces in `report`: gzip'd Kineto JSON (zlib), Nsight Systems SQLite exports.
  zlib1g-dev libsqlite3-dev
  chromium fonts-liberation libpng-dev
  # The sanitizer lane (scripts/sanitize.sh): clang, its ASan/UBSan/libFuzzer runtimes
  # (libclang_rt.*.a), llvm-symbolizer for readable stack traces.
  clang libclang-rt-dev llvm
  # The format and clang-tidy lanes (scripts/format.sh, scripts/tidy.sh).
  clang-format clang-tidy
  # The cross-host test (cross_host_mpi_test): network namespaces, veth pairs, tc.
  iproute2
)
PACKAGES+=(${TP_EXTRA_PACKAGES:-})

do_packages() {
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

do_build() {
  BUILD_DIR=${BUILD_DIR:-build}
  BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
  # Any compiler warning fails the build (TIGHTPIPE_WERROR; TP_WERROR=0 turns it off, e.g. for a
  # newer compiler than Debian 12's GCC 12 with warnings of its own). A build folder configured the
  # other way is reconfigured (the flags change, so it recompiles).
  werror=$([ "${TP_WERROR:-1}" = 0 ] && echo OFF || echo ON)
  # Each library and test program compiles as one translation unit (TIGHTPIPE_UNITY,
  # CMakeLists.txt tp_unity): a clean build in two thirds of the CPU time (docs/testing.md).
  # TP_UNITY=0 builds file by file: an edit recompiles one file instead of its target's, and
  # each file must include what it uses (a unity file lets one lean on an earlier one's).
  unity=$([ "${TP_UNITY:-1}" = 0 ] && echo OFF || echo ON)
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
      -DTIGHTPIPE_WERROR="$werror" -DTIGHTPIPE_UNITY="$unity" ${CMAKE_ARGS:-}
  elif ! grep -qx "TIGHTPIPE_WERROR:BOOL=$werror" "$BUILD_DIR/CMakeCache.txt" ||
    ! grep -qx "TIGHTPIPE_UNITY:BOOL=$unity" "$BUILD_DIR/CMakeCache.txt"; then
    cmake -S . -B "$BUILD_DIR" -DTIGHTPIPE_WERROR="$werror" -DTIGHTPIPE_UNITY="$unity" >/dev/null
  fi
  # BUILD_TARGETS: what to build (default: everything; the demo builds only the CLI it runs).
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
}
for step in "${steps[@]}"; do
  "do_$step"
done
