#!/usr/bin/env bash
# Run every test suite (core, then each driver) with stestr, then the mutants,
# the distributions check (tools/check-dists.sh) and the documentation build,
# and print the real counts.  Components (PostgreSQL, libvirt, Ironic) are required: a
# missing one fails its tests instead of skipping them.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${NOVA_LITE_VENV:-$ROOT/.venv}
export PATH="$VENV/bin:$PATH"
export NOVA_LITE_REQUIRE_ALL=${NOVA_LITE_REQUIRE_ALL:-1}
# Screenshots of the overview page's browser tests are kept here.
export NOVA_LITE_TEST_ARTIFACTS=${NOVA_LITE_TEST_ARTIFACTS:-$ROOT/test-artifacts}
out=$(mktemp -d)
summary_args=()
runner_errors=0

run_suite() {   # name dir
    local name=$1 dir=$2
    echo "=== suite $name ($dir) ==="
    ( cd "$dir" && rm -rf .stestr && stestr init >/dev/null && stestr run --color ) ; rc=$?
    ( cd "$dir" && stestr last --subunit > "$out/$name.subunit" ) 2>/dev/null || true
    if [ $rc -ne 0 ] && [ ! -s "$out/$name.subunit" ]; then
        echo "suite $name: the runner failed before running tests (exit $rc)"
        runner_errors=$((runner_errors + 1))
    elif [ $rc -ne 0 ]; then
        # stestr also exits non-zero on import errors, which no test records.
        local failed
        failed=$(python "$ROOT/tools/subunit_summary.py" "$name=$out/$name.subunit" \
                 | tail -n 1 | awk '{print $3}')
        if [ "${failed:-0}" -eq 0 ]; then
            echo "suite $name: stestr exited $rc with no failed test (import or runner error)"
            runner_errors=$((runner_errors + 1))
        fi
    fi
    summary_args+=("$name=$out/$name.subunit")
}

run_suite core "$ROOT"
for d in "$ROOT"/drivers/*/; do
    [ -f "$d/.stestr.conf" ] && run_suite "$(basename "$d")" "$d"
done

# Mutants: each guard of the claim path broken on a copy of the tree must
# make the suite fail; every mutant caught counts as passed.
echo "=== mutants (tools/mutants.py) ==="
mutants_out=$(python "$ROOT/tools/mutants.py" 2>&1); mutants_rc=$?
echo "$mutants_out" | grep -E '^(killed|SURVIVED|    tests)'
mutants_line=$(echo "$mutants_out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
mutants_passed=$(echo "$mutants_line" | awk '{print $1}')
mutants_failed=$(echo "$mutants_line" | awk '{print $3}')
if [ -z "$mutants_line" ] || { [ "$mutants_rc" -ne 0 ] && [ "${mutants_failed:-0}" -eq 0 ]; }; then
    echo "$mutants_out" | tail -n 20
    echo "mutants: the script failed before it could report (exit $mutants_rc)"
    mutants_passed=0; mutants_failed=1
fi
echo "mutants: $mutants_passed killed, $mutants_failed survived"

# Distributions: tools/check-dists.sh builds the three, twine-checks them and
# runs each sdist's tests from its unpacked tree; each of its checks counts.
echo "=== distributions (tools/check-dists.sh) ==="
dists_out=$(NOVA_LITE_VENV=$VENV "$ROOT/tools/check-dists.sh" 2>&1); dists_rc=$?
dists_line=$(echo "$dists_out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
dists_passed=$(echo "$dists_line" | awk '{print $1}')
dists_failed=$(echo "$dists_line" | awk '{print $3}')
if [ -z "$dists_line" ] || { [ "$dists_rc" -ne 0 ] && [ "${dists_failed:-0}" -eq 0 ]; }; then
    echo "$dists_out" | tail -n 20
    echo "distributions: the script failed before it could report (exit $dists_rc)"
    dists_passed=0; dists_failed=1
elif [ "$dists_failed" -ne 0 ]; then
    echo "$dists_out" | tail -n 80
else
    echo "$dists_out" | grep -E '^ok '
fi
echo "distributions: $dists_passed passed, $dists_failed failed"

# Documentation: `make docs` (a virtualenv from doc/requirements.txt alone,
# sphinx-build -n -W) counts as one test.
echo "=== docs (make docs) ==="
docs_passed=0; docs_failed=0
if docs_out=$(make -s -C "$ROOT" docs 2>&1); then
    docs_passed=1; echo "docs: built with no warning"
else
    docs_failed=1; echo "$docs_out" | grep -v "is ignored: it is neither" | tail -n 30
    echo "docs: the build failed"
fi

echo "=== summary ==="
report=$(python "$ROOT/tools/subunit_summary.py" "${summary_args[@]}")
echo "$report" | sed '$d'
line=$(echo "$report" | tail -n 1)
passed=$(echo "$line" | awk '{print $1}')
failed=$(echo "$line" | awk '{print $3}')
skipped=$(echo "$line" | awk '{print $5}')
passed=$((passed + mutants_passed + dists_passed + docs_passed))
failed=$((failed + runner_errors + mutants_failed + dists_failed + docs_failed))
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
