#!/usr/bin/env bash
# The featurizer's, the model step's and the record reader's C code under AddressSanitizer and UBSan:
#   scripts/test-sanitizers.sh [pytest arguments]     (default: tests/features)
# builds the extensions with -fsanitize=address,undefined into a copy of the checkout's
# tracked files (the checkout's own build is left alone), and runs pytest there with the
# .venv of `make setup`, both sanitizer runtimes preloaded (Python itself is not built with
# them). Any sanitizer report stops the run with a non-zero exit. About twice as slow as the
# plain tests: tests/features takes ten minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py="$root/.venv/bin/python"
[[ -x $py ]] || { echo "test-sanitizers.sh: run 'make setup' first (no $py)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/streamnb-sanitizers.XXXXXX")
trap 'rm -rf "$work"' EXIT
git ls-files -z | (cd "$root" && xargs -0 cp --parents -t "$work")
# the corpora are found beside the checkout (../shared/data) unless STREAMNB_DATA says where
export STREAMNB_DATA=${STREAMNB_DATA:-$root/../shared/data}

include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
flags=(-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -fPIC -shared -Wall -Wextra -I"$include")
cd "$work"
gcc "${flags[@]}" -Wno-missing-field-initializers streamnb/features/_tokens.c \
    -o "streamnb/features/_tokens$suffix"
# no fused multiply-add, as setup.py builds it: the step's spreads are the short path's to the bit
gcc "${flags[@]}" -ffp-contract=off streamnb/models/_step.c -o "streamnb/models/_step$suffix"
gcc "${flags[@]}" streamnb/daemon/_records.c -o "streamnb/daemon/_records$suffix"

export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
# CPython's allocator keeps memory to the end: leaks would be reported for every run
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# the copy's streamnb, not the editable install's: the copy's directory comes first on the path
"$py" -c 'import streamnb.features.native as n, streamnb.daemon.records as r, sys; sys.exit(any(m is None or not m.__file__.startswith(sys.argv[1]) for m in (n._tokens, sys.modules.get("streamnb.daemon._records"))))' "$work" \
    || { echo "test-sanitizers.sh: the sanitized extensions are not the ones imported" >&2; exit 1; }
"$py" -m pytest -q -p no:cacheprovider "${@:-tests/features}"
