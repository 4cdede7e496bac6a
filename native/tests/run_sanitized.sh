#!/usr/bin/env bash
# Builds the C tests of the core with AddressSanitizer + UBSan and runs them:
# test_segment, test_bulk_copy, test_huge_pages, test_reduce_ops, test_node_algos, test_trace, test_ftar_ring, test_codec and test_cachesim once, test_comm_mpi and test_requests_mpi under mpiexec with
# 1, 2, 3 and 4 ranks; then the preload library, built the same way, under
# tests/pmpi_programs/check_collectives.c at 2 and 3 ranks and on virtual nodes. With --valgrind it also runs the non-MPI tests
# under valgrind, from a separate plain debug build (<builddir>-valgrind).
#
# Usage: native/tests/run_sanitized.sh [--valgrind] [--build-only] [builddir]   (default build-sanitize)
# --build-only configures and builds (both builds with --valgrind) and runs nothing; a later run
# reuses the builds.
# Needs mpicc and mpiexec on PATH (MPICH or Open MPI). Exit status non-zero
# when a build or any test fails.
set -u -o pipefail

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

builddir=build-sanitize
use_valgrind=0
build_only=0
for arg in "$@"; do
    case "$arg" in
    --valgrind) use_valgrind=1 ;;
    --build-only) build_only=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "unknown option: $arg" >&2; usage >&2; exit 2 ;;
    *) builddir=$arg ;;
    esac
done

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
start=$SECONDS
failed=()

# Two cores are shared with other work: build with two jobs.
jobs=${PMC_TEST_JOBS:-2}
tests=(test_segment test_bulk_copy test_huge_pages test_reduce_ops test_node_algos test_trace test_ftar_ring test_codec test_cachesim test_comm_mpi test_requests_mpi)

configure() { # dir, extra meson options...: output shown only on failure
    local dir=$1
    shift
    local opts=(-Dtests=true -Dwerror=true -Dbuildtype=debug "$@")
    [ -f "$dir/build.ninja" ] && opts=(--reconfigure "${opts[@]}")
    local log
    log=$(mktemp)
    if ! meson setup "$dir" "${opts[@]}" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "configure of $dir failed" >&2
        return 1
    fi
    rm -f "$log"
}

build() { # dir, extra targets...
    local dir=$1
    shift
    meson compile -C "$dir" -j "$jobs" "${tests[@]}" "$@"
}

run() { # label, command...: runs under `timeout 120`, records a failure
    local label=$1
    shift
    local t0=$SECONDS
    echo "=== $label"
    timeout 120 "$@"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        [ "$rc" -eq 124 ] && echo "=== $label: TIMED OUT after 120 s" >&2
        echo "=== $label: FAILED (exit $rc)" >&2
        failed+=("$label")
    else
        echo "=== $label: ok ($((SECONDS - t0)) s)"
    fi
}

echo "### configure and build $builddir (ASan + UBSan)"
configure "$builddir" -Db_sanitize=address,undefined -Db_lundef=false || exit 1
build "$builddir" pymcoll_pmpi || { echo "build of $builddir failed" >&2; exit 1; }
bin=$builddir/native/tests
vdir=$builddir-valgrind
if [ "$build_only" -eq 1 ]; then
    if [ "$use_valgrind" -eq 1 ]; then
        echo "### configure and build $vdir (plain debug, for valgrind)"
        configure "$vdir" -Db_sanitize=none || exit 1
        build "$vdir" || { echo "build of $vdir failed" >&2; exit 1; }
    fi
    echo "### built in $((SECONDS - start)) s"
    exit 0
fi

# Both sanitizers stop at the first report; UBSan with a stack trace.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan_plain=detect_leaks=1:abort_on_error=1
asan_mpi=detect_leaks=0:abort_on_error=1 # MPI's leaks at finalize are not ours

ASAN_OPTIONS=$asan_plain run test_segment "$bin/test_segment"
ASAN_OPTIONS=$asan_plain run test_bulk_copy "$bin/test_bulk_copy"
ASAN_OPTIONS=$asan_plain run test_huge_pages "$bin/test_huge_pages"
ASAN_OPTIONS=$asan_plain run test_reduce_ops "$bin/test_reduce_ops"
ASAN_OPTIONS=$asan_plain run test_node_algos "$bin/test_node_algos"
ASAN_OPTIONS=$asan_plain run test_trace "$bin/test_trace"
ASAN_OPTIONS=$asan_plain run test_ftar_ring "$bin/test_ftar_ring"
ASAN_OPTIONS=$asan_plain run test_codec "$bin/test_codec"
ASAN_OPTIONS=$asan_plain run test_cachesim "$bin/test_cachesim"

mpiexec_args=()
if mpiexec --version 2>/dev/null | grep -q "Open MPI"; then
    # Open MPI: allow 4 ranks on 2 cores and running as root (containers),
    # and pass the sanitizer settings on explicitly.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mpiexec_args=(--oversubscribe -x ASAN_OPTIONS -x UBSAN_OPTIONS)
fi
for n in 1 2 3 4; do
    ASAN_OPTIONS=$asan_mpi run "test_comm_mpi -n $n" mpiexec "${mpiexec_args[@]}" -n "$n" "$bin/test_comm_mpi"
    ASAN_OPTIONS=$asan_mpi run "test_requests_mpi -n $n" mpiexec "${mpiexec_args[@]}" -n "$n" "$bin/test_requests_mpi"
done

# The preload library in an unmodified program: the sanitizer runtimes are
# preloaded ahead of it, in the ranks only.
check=$builddir/check_collectives
if mpicc -std=c11 -O1 -o "$check" tests/pmpi_programs/check_collectives.c; then
    preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so):$builddir/libpymcoll_pmpi.so"
    if mpiexec --version 2>/dev/null | grep -q "Open MPI"; then
        env_args() { local a=(); for kv in "$@"; do a+=(-x "$kv"); done; echo "${a[@]}"; }
    else
        env_args() { local a=(); for kv in "$@"; do a+=(-genv "${kv%%=*}" "${kv#*=}"); done; echo "${a[@]}"; }
    fi
    # shellcheck disable=SC2046 # the flags are words without spaces
    for n in 2 3; do
        run "preload check_collectives -n $n" mpiexec "${mpiexec_args[@]}" \
            $(env_args "LD_PRELOAD=$preload" "ASAN_OPTIONS=$asan_mpi") -n "$n" "$check"
    done
    # shellcheck disable=SC2046
    rm -rf "$builddir/trace"
    run "preload check_collectives -n 4, nodes of 2, traced" mpiexec "${mpiexec_args[@]}" \
        $(env_args "LD_PRELOAD=$preload" "ASAN_OPTIONS=$asan_mpi" PYMCOLL_NODE_SIZE=2 "PYMCOLL_TRACE=$builddir/trace") \
        -n 4 "$check"
    for r in 0 1 2 3; do
        [ -s "$builddir/trace/rank$r.json" ] || { echo "=== no trace dump of rank $r" >&2; failed+=("trace dump rank $r"); }
    done
else
    echo "=== preload check_collectives: FAILED (mpicc)" >&2
    failed+=("preload check_collectives (mpicc)")
fi

if [ "$use_valgrind" -eq 1 ]; then
    echo "### configure and build $vdir (plain debug, for valgrind)"
    configure "$vdir" -Db_sanitize=none || exit 1
    build "$vdir" || { echo "build of $vdir failed" >&2; exit 1; }
    # Forked children are traced too (valgrind follows fork); each exits 1
    # on an error or a leak, which the test's parent reports.
    vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,possible)
    run "valgrind test_segment" "${vg[@]}" "$vdir/native/tests/test_segment"
    PMC_TEST_QUICK=1 run "valgrind test_bulk_copy" "${vg[@]}" "$vdir/native/tests/test_bulk_copy"
    run "valgrind test_huge_pages" "${vg[@]}" "$vdir/native/tests/test_huge_pages"
    PMC_TEST_QUICK=1 run "valgrind test_reduce_ops" "${vg[@]}" "$vdir/native/tests/test_reduce_ops"
    run "valgrind test_node_algos" "${vg[@]}" "$vdir/native/tests/test_node_algos" --quick
    run "valgrind test_trace" "${vg[@]}" "$vdir/native/tests/test_trace"
    PMC_TEST_QUICK=1 run "valgrind test_ftar_ring" "${vg[@]}" "$vdir/native/tests/test_ftar_ring"
    PMC_TEST_QUICK=1 run "valgrind test_codec" "${vg[@]}" "$vdir/native/tests/test_codec"
    PMC_TEST_QUICK=1 run "valgrind test_cachesim" "${vg[@]}" "$vdir/native/tests/test_cachesim"
fi

echo "### $((SECONDS - start)) s"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "### FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "### all passed"
