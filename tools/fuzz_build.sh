#!/bin/sh
# The build the fuzz targets (tests/fuzz/targets.py) run on: a copy of the checkout's
# sources in FUZZ_DIR/tree whose native modules are compiled by clang with
# AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's coverage hooks
# (-fsanitize=fuzzer-no-link), so that atheris sees the edges of the C code as well as
# the Python it instruments itself, and a bad read or write in it stops the run.  The
# checkout's own optimised modules are left alone.
#
# Also made: FUZZ_DIR/libfuzzer_no_main.so, clang's libFuzzer as a shared library.  The
# run preloads it and clang's ASan runtime (which carries UBSan's handlers), so that
# every module's hooks find one runtime; atheris then uses that libFuzzer instead of
# its own copy.  FUZZ_DIR/env holds the variables a run needs.
#
# Usage: tools/fuzz_build.sh PYTHON FUZZ_DIR [CLANG]   (idempotent: the modules are
# rebuilt only when a native source changed since the last build)
set -eu
# Absolute (the build runs in FUZZ_DIR/tree); the venv's own path, not its target.
PYTHON=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
FUZZ_DIR=$(mkdir -p "$2" && cd "$2" && pwd)
CLANG=${3:-$(command -v clang || command -v clang-14 || true)}
if [ -z "$CLANG" ]; then
    echo "fuzz_build: no clang (apt-get install clang-14): the fuzz targets need its" \
         "-fsanitize=fuzzer-no-link for coverage of the native modules" >&2
    exit 1
fi
HERE=$(cd "$(dirname "$0")/.." && pwd)
RUNTIME=$($CLANG -print-runtime-dir 2>/dev/null || true)
if [ ! -f "$RUNTIME/libclang_rt.fuzzer_no_main-x86_64.a" ]; then
    RUNTIME=$(dirname "$($CLANG -print-file-name=libclang_rt.fuzzer_no_main-x86_64.a)")
fi
for lib in libclang_rt.fuzzer_no_main-x86_64.a libclang_rt.asan-x86_64.so; do
    test -f "$RUNTIME/$lib" || { echo "fuzz_build: $RUNTIME/$lib is missing" \
        "(apt-get install libclang-rt-14-dev)" >&2; exit 1; }
done

# The sources, as the working tree has them (compiled modules, Cython's C and caches
# left out), copied every time.  setup.py recompiles every module of a sanitizer build,
# so that happens only when a native source (.pyx, .pxd, csrc/, setup.py) is newer
# than the last build.
SOURCES="netkafka csrc setup.py pyproject.toml README.md LICENSE"
cd "$HERE"
native_changed() {
    [ ! -f "$FUZZ_DIR/.built" ] || [ -n "$(find netkafka csrc setup.py -newer "$FUZZ_DIR/.built" \
        \( -name '*.pyx' -o -name '*.pxd' -o -path 'csrc/*' -o -name setup.py \) -print -quit)" ]
}
copy_sources() {
    mkdir -p "$FUZZ_DIR/tree"
    tar cf - --exclude='*.so' --exclude=__pycache__ --exclude='netkafka/*.c' \
        --exclude='*.html' $SOURCES | (cd "$FUZZ_DIR/tree" && tar xf -)
}
if native_changed; then
    rm -rf "$FUZZ_DIR/tree"
    copy_sources
    (cd "$FUZZ_DIR/tree" &&
        CC="$CLANG" LDSHARED="$CLANG -shared" CFLAGS="-g" \
        NETKAFKA_SANITIZE=address,undefined,fuzzer-no-link \
        NETKAFKA_BUILD_DIR="$FUZZ_DIR/build" \
        "$PYTHON" setup.py --quiet build_ext --inplace -j 2)
    touch "$FUZZ_DIR/.built"
else
    copy_sources
fi

if [ ! -f "$FUZZ_DIR/libfuzzer_no_main.so" ] || \
        [ "$RUNTIME/libclang_rt.fuzzer_no_main-x86_64.a" -nt "$FUZZ_DIR/libfuzzer_no_main.so" ]; then
    "$CLANG" -shared -o "$FUZZ_DIR/libfuzzer_no_main.so" -Wl,--whole-archive \
        "$RUNTIME/libclang_rt.fuzzer_no_main-x86_64.a" -Wl,--no-whole-archive \
        -lstdc++ -lpthread -ldl -lm
fi

# libFuzzer first: the ASan runtime has weak stand-ins for the coverage hooks, and the
# first library to define a symbol wins -- with ASan first, atheris warns and the
# native modules' coverage goes nowhere (seen: 11 features instead of thousands).  ASan
# would refuse not to be first; nothing of its own comes before it but libFuzzer,
# which intercepts nothing, hence verify_asan_link_order=0.
# PYTHONMALLOC=malloc: every Python object in its own malloc block, so that ASan sees
# the bounds of the buffers the decoders read.  Leaks are not this run's question
# (the interpreter keeps much of what it allocates until exit).  A quarantine of 64 MB
# instead of 256, and make fuzz's -rss_limit_mb=4096, are for long runs: one target
# was at 1 GB after 6 minutes (libFuzzer's default limit is 2 GB).
cat > "$FUZZ_DIR/env" <<EOF
LD_PRELOAD=$FUZZ_DIR/libfuzzer_no_main.so:$RUNTIME/libclang_rt.asan-x86_64.so
PYTHONMALLOC=malloc
PYTHONPATH=$FUZZ_DIR/tree
ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:handle_abort=1:verify_asan_link_order=0:quarantine_size_mb=64
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
EOF
echo "fuzz_build: sanitized, coverage-instrumented netkafka in $FUZZ_DIR/tree"
