#!/usr/bin/env bash
# One-step set-up of dcp-vk on a fresh Debian 12 machine (as root), then one job:
#   bash scripts/setup.sh run    install, build, generate a short story with stories260K
#                                (tests/data/) at TP 8, DCP 2 over logical devices of the first
#                                Vulkan device: greedy, so the same text as on one device
#   bash scripts/setup.sh test   install, build with warnings as errors (-DDCP_WERROR=ON), run
#                                the whole test suite (CTest) once, every test once (no retries),
#                                the kernel tests on Mesa 22, the GPU tests with 256-byte binding
#                                offsets, the kernel tests with 16-lane subgroups, kernel and model
#                                tests under GPU-assisted validation (every shader dispatched), the
#                                whole suite again in an ASan+UBSan build; before all that it
#                                builds (without running) a gcc Release and a clang Debug tree,
#                                warnings as errors
#   bash scripts/setup.sh build  install and build only
# Environment: DCP_SKIP_APT=1 skips the package step, DCP_SKIP_NPM=1 the Node client; BUILD_DIR
# (default build); JOBS (default nproc).
set -euo pipefail
job=${1:-run}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
jobs=${JOBS:-$(nproc)}

install_packages() {
    [ "${DCP_SKIP_APT:-0}" = 1 ] && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # Mesa 25 (lavapipe with Vulkan 1.4, 3-4x faster compute) comes from bookworm-backports.
    local src=/etc/apt/sources.list.d/debian.sources
    if [ -f "$src" ] && ! grep -q bookworm-backports "$src"; then
        $sudo sed -i 's/^Suites: bookworm bookworm-updates$/Suites: bookworm bookworm-updates bookworm-backports/' "$src"
    fi
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends \
        build-essential clang cmake pkg-config glslang-tools spirv-tools libvulkan-dev vulkan-tools \
        vulkan-validationlayers libcmocka-dev mpich libmpich-dev libpcre2-dev \
        libmicrohttpd-dev libcjson-dev curl python3-matplotlib
    # dcp-vk-serve's tests drive it with the official OpenAI JavaScript client: Node.js (any
    # Node >= 18; Debian's when none is installed).
    command -v node >/dev/null && command -v npm >/dev/null ||
        $sudo apt-get install -y -q --no-install-recommends nodejs npm
    if grep -qs bookworm-backports "$src"; then
        $sudo apt-get install -y -q -t bookworm-backports mesa-vulkan-drivers ||
            $sudo apt-get install -y -q mesa-vulkan-drivers
    else
        $sudo apt-get install -y -q mesa-vulkan-drivers
    fi
}

build_tree() { # build_tree DIR [cmake options...] (RelWithDebInfo unless an option says otherwise)
    local dir=$1
    shift
    cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j "$jobs"
}

# Unpacks Debian 12's mesa-vulkan-drivers (Mesa 22) into DIR and writes DIR/lvp_icd.json.
mesa22() {
    local dir=$1
    if [ ! -f "$dir/lvp_icd.json" ]; then
        rm -rf "$dir" && mkdir -p "$dir"
        (cd "$dir" && apt-get download mesa-vulkan-drivers/bookworm >/dev/null 2>&1) || {
            echo "setup.sh: cannot download Mesa 22 (mesa-vulkan-drivers/bookworm)" >&2
            return 1
        }
        dpkg -x "$dir"/mesa-vulkan-drivers_*.deb "$dir/root"
        local lib
        lib=$(find "$dir/root" -name libvulkan_lvp.so | head -n 1)
        printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.3.230"}}\n' \
            "$lib" >"$dir/lvp_icd.json"
    fi
}

# The OpenAI JavaScript client of the dcp-vk-serve tests, pinned by tests/serve/package-lock.json,
# into tests/serve/node_modules (git-ignored). The tests need no network afterwards.
install_node_client() {
    [ "${DCP_SKIP_NPM:-0}" = 1 ] && return 0
    if [ ! -f "$here/tests/serve/node_modules/openai/package.json" ]; then
        (cd "$here/tests/serve" && npm ci --no-audit --no-fund --loglevel=error)
    fi
}

# The shaders (shaders/*.comp) of which no pipeline appears in the dispatch log $1 (written by
# DCP_VK_DISPATCH_LOG, one kernel id a line): src/kernels/kernels.def names each kernel's shader;
# a DCP_KERNEL_WEIGHTS entry OP logs as OP_<weight type>. Prints them; fails if there is one.
uncovered_shaders() {
    awk 'FNR == 1 { file++ }
         file == 1 && /^DCP_KERNEL(_KV|_WEIGHTS)?\(/ {
             l = $0; w = (l ~ /^DCP_KERNEL_WEIGHTS\(/); sub(/^DCP_KERNEL[A-Z_]*\(/, "", l); split(l, f, / *, */)
             shader[f[2]] = 1; if (w) weighted[f[1]] = f[2]; else of[f[1]] = f[2] }
         file == 2 { if ($1 in of) seen[of[$1]] = 1
                     else for (op in weighted) if (index($1, op "_") == 1) seen[weighted[op]] = 1 }
         END { n = 0; for (s in shader) n++; if (n == 0) { print "(no kernels read)"; exit 1 }
               for (s in shader) if (!(s in seen)) { print s ".comp"; bad = 1 }; exit bad }' \
        "$here/src/kernels/kernels.def" "$1"
}

install_packages
install_node_client
# Users build without -Werror; the test job (CI) treats every warning as an error.
if [ "$job" = test ]; then
    build_tree "$build" -DDCP_WERROR=ON
else
    build_tree "$build" -DDCP_WERROR=OFF
fi
case "$job" in
build) ;;
run)
    # Eight logical devices on the first Vulkan device: tensor parallel 8, DCP 2, greedy decoding
    # (tests/test_run.c checks that this gives the text of TP 1).
    DCP_VK_DEVICES=${DCP_VK_DEVICES:-0,0,0,0,0,0,0,0} "$build/dcp-vk-run" -m "$here/tests/data/stories260K.gguf" \
        -p "Once upon a time" -n 64 --temp 0 --tensor-parallel-size 8 --decode-context-parallel-size 2
    ;;
test)
    # The other build types users pick, warnings as errors, first (a compiler's warning fails in
    # minutes, not after the suites): gcc Release and clang Debug (library, apps and tests
    # compiled; the tests run below in the first tree).
    build_tree "$build-release" -DCMAKE_BUILD_TYPE=Release -DDCP_WERROR=ON
    command -v clang >/dev/null || {
        echo "setup.sh: clang is not installed (apt-get install clang): the clang build cannot run" >&2
        exit 1
    }
    CC=clang build_tree "$build-clang-debug" -DCMAKE_BUILD_TYPE=Debug -DDCP_WERROR=ON
    # Every test once: a test that fails once fails CI (a crash seen once is a defect to find,
    # never retried away). The suite includes the exit-code stress tests (label stress:
    # dcp-vk-run and dcp-vk-serve started again and again, no exit by a signal allowed).
    (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 1200)
    # The kernels again on Debian 12's own Mesa 22 lavapipe (fewer features, and it silently ends
    # shader loops after 65,535 iterations per invocation): its driver unpacked beside the build.
    mesa22 "$build/mesa22" && (cd "$build" && VK_ICD_FILENAMES="$build/mesa22/lvp_icd.json" \
        ctest --output-on-failure -j "$jobs" -L mesa22)
    # Every storage-buffer binding offset a multiple of 256 bytes (some GPUs' minStorageBufferOffsetAlignment;
    # lavapipe asks 16): the GPU tests of label align256 again, validation layer on.
    (cd "$build" && DCP_VK_MIN_STORAGE_ALIGN=256 ctest --output-on-failure -j "$jobs" -L align256)
    # Subgroups of 16 lanes (lavapipe's subgroup follows LP_NATIVE_VECTOR_WIDTH / 32; 8 by default
    # on AVX2): the kernel tests again. Lavapipe cannot go wider: above 512 bits its subgroup
    # reductions cover only the first 16 lanes (docs/design.md, "Subgroup widths").
    (cd "$build" && LP_NATIVE_VECTOR_WIDTH=512 ctest --output-on-failure -j "$jobs" -L mesa22)
    # GPU-assisted validation (DCP_VK_VALIDATION=gpuav): the validation layer bounds-checks every
    # buffer access of every shader as it runs (robust access off), any message fails the test.
    # The tests of label gpuav (tests/CMakeLists.txt: kernels, a llama and a deepseek2 model test
    # at small shapes) must together dispatch a pipeline of every shader, as their dispatch log
    # shows.
    gpuav_log="$build/gpuav-dispatch.log" t0=$SECONDS
    rm -f "$gpuav_log"
    (cd "$build" && DCP_VK_DISPATCH_LOG="$gpuav_log" ctest --output-on-failure -j "$jobs" -C gpuav -L gpuav --timeout 1200)
    missing=""
    if ! missing=$(uncovered_shaders "$gpuav_log"); then
        echo "setup.sh: the GPU-assisted validation tests dispatched no pipeline of:" $missing >&2
        exit 1
    fi
    echo "setup.sh: GPU-assisted validation: $((SECONDS - t0)) s, every shader dispatched"
    # AddressSanitizer + UBSan build, the whole suite (GPU and MPI tests included) but for the
    # repeats of the MPI tests at more processes and layouts (each of those binaries runs at least
    # once here: mpi2 / mpi_1) and the exit-code stress tests (the apps started 90 times), which
    # would not fit CI's time on 2 cores under ASan; leaks kept by the Vulkan loader, the
    # validation layer, lavapipe/LLVM and MPICH are suppressed (tests/sanitizer/lsan.supp), nothing
    # of ours. Every test once, as above.
    build_tree "$build-asan" -DDCP_SANITIZE=ON -DDCP_WERROR=ON
    (cd "$build-asan" && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$here/tests/sanitizer/lsan.supp:print_suppressions=0" \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$jobs" --timeout 2400 \
        -E 'mpi4|mpi8|mpi2x|_nodes|serve_mpi|run_mpi|harden_mpi|bench_dcp_mpi2|app_bench_comm_mpi2|archs_apps|stress_exit')
    ;;
*)
    echo "usage: bash scripts/setup.sh run|test|build" >&2
    exit 2
    ;;
esac
