#!/bin/sh
# ctest's test_python: the Python package's pytest suite over the build tree's module.
#   run.sh PYTHON BUILD_PYTHON_DIR TUBELET_BIN TESTS_DIR SANITIZE(ON|OFF) C_COMPILER LOADER_DUMP
# Exits 77 (skipped) where the module was not built (no Python or NumPy headers) or pytest is
# missing; pytest's 5 (no tests collected) is a failure, since tests went missing.
py=$1 pydir=$2 bin=$3 tests=$4 sanitize=$5 cc=$6 dump=$7
if ! ls "$pydir"/tubelet/_tubelet*.so >/dev/null 2>&1; then
    echo "test_python: the module was not built (python3-dev, python3-numpy): skipped"
    exit 77
fi
if ! "$py" -c "import pytest" 2>/dev/null; then
    echo "test_python: $py has no pytest (python3-pytest): skipped"
    exit 77
fi
if [ "$sanitize" = ON ]; then
    # An instrumented module in an uninstrumented interpreter: the sanitizer runtimes must be
    # loaded first. Python's own allocations are not ours to account for: no leak report.
    asan=$("$cc" -print-file-name=libasan.so) ubsan=$("$cc" -print-file-name=libubsan.so)
    export LD_PRELOAD="$asan $ubsan"
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
fi
export PYTHONPATH="$pydir" TUBELET_BIN="$bin" TUBELET_LOADER_DUMP="$dump" PYTHONDONTWRITEBYTECODE=1
"$py" -m pytest -q -p no:cacheprovider "$tests"
rc=$?
[ $rc = 5 ] && { echo "test_python: pytest collected no tests"; exit 1; }
exit $rc
