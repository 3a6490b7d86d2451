#!/usr/bin/env bash
# Create (idempotently) the virtualenv holding OpenStack Nova for the
# benchmark that sets nova-lite beside Nova's own ResourceTracker
# (bench/nova_compare.py runs bench/nova_side.py with its interpreter).  Nova pins
# its own oslo.*, SQLAlchemy and eventlet, so it never shares .venv.
#
# Usage: tools/nova-venv.sh [--print-path] [--refresh-constraints]
#
#   NOVA_LITE_NOVA_VENV  where the venv lives (default: <repo>/.venv-nova)
#   PYTHON               the interpreter to build it from (default: python3)
#
# A venv already holding the pinned version with the same constraints is
# left alone.  Creating one takes one to two minutes with PyPI reachable.
set -euo pipefail

NOVA_VERSION="34.0.0"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${NOVA_LITE_NOVA_VENV:-$repo/.venv-nova}"
python="${PYTHON:-python3}"
constraints="$repo/bench/nova-constraints.txt"
refresh=0

for arg in "$@"; do
    case "$arg" in
        --print-path) echo "$venv"; exit 0 ;;
        --refresh-constraints) refresh=1 ;;
        *) echo "nova-venv.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

stamp="$venv/.nova-lite-nova-stamp"
want="nova==$NOVA_VERSION $(sha256sum "$constraints" | cut -d' ' -f1)"
if [ "$refresh" = 0 ] && [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "nova venv ready: $venv (nova $NOVA_VERSION)"
    exit 0
fi

start=$(date +%s)
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
rm -f "$stamp"
if [ "$refresh" = 1 ]; then
    "$venv/bin/pip" install --quiet "nova==$NOVA_VERSION"
    {
        echo "# Constraints for the benchmark-only Nova virtualenv (tools/nova-venv.sh)."
        echo "# Resolved by pip for nova==$NOVA_VERSION on Python 3.11; regenerate with"
        echo "#   tools/nova-venv.sh --refresh-constraints"
        "$venv/bin/pip" freeze --exclude nova
    } > "$constraints"
    want="nova==$NOVA_VERSION $(sha256sum "$constraints" | cut -d' ' -f1)"
else
    "$venv/bin/pip" install --quiet -c "$constraints" "nova==$NOVA_VERSION"
fi
"$venv/bin/python" -W ignore -c "import nova.compute.resource_tracker" >/dev/null
echo "$want" > "$stamp"
echo "nova venv created: $venv (nova $NOVA_VERSION) in $(( $(date +%s) - start )) s"
