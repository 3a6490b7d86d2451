#!/usr/bin/env bash
# Create (idempotently) the virtualenv that holds a real OpenStack Ironic for
# nova-lite-ironic's functional tests.  It is kept apart from the project's
# own virtualenv: Ironic pins its own oslo.*, SQLAlchemy, eventlet, ...
#
# Usage: tools/ironic-venv.sh [--print-path] [--refresh-constraints]
#
#   NOVA_LITE_IRONIC_VENV  where the venv lives (default: <repo>/.venv-ironic)
#   PYTHON                 the interpreter to build it from (default: python3)
#
# A venv already holding the pinned version with the same constraints is left
# alone (a second run takes well under a second).  Creating one from scratch
# takes about 40 s on a 2-core machine with PyPI reachable.
set -euo pipefail

IRONIC_VERSION="39.0.0"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="${NOVA_LITE_IRONIC_VENV:-$repo/.venv-ironic}"
python="${PYTHON:-python3}"
constraints="$here/ironic-constraints.txt"
refresh=0

for arg in "$@"; do
    case "$arg" in
        --print-path) echo "$venv"; exit 0 ;;
        --refresh-constraints) refresh=1 ;;
        *) echo "ironic-venv.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

stamp_text="ironic==$IRONIC_VERSION $(sha256sum "$constraints" | cut -d' ' -f1)"
if [ "$refresh" = 1 ]; then
    stamp_text="refresh"
fi
stamp="$venv/.nova-lite-ironic-stamp"

up_to_date() {
    [ -x "$venv/bin/ironic" ] && [ -x "$venv/bin/ironic-dbsync" ] \
        && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ]
}

if up_to_date; then
    echo "ironic venv ready: $venv (ironic $IRONIC_VERSION)"
    exit 0
fi

mkdir -p "$venv"
# One creator at a time: parallel test workers may call this together.
exec 9>"$venv/.nova-lite-ironic-lock"
flock 9
if up_to_date; then
    echo "ironic venv ready: $venv (ironic $IRONIC_VERSION)"
    exit 0
fi

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
rm -f "$stamp"
if [ "$refresh" = 1 ]; then
    "$venv/bin/pip" install --quiet "ironic==$IRONIC_VERSION"
    {
        echo "# Constraints for the test-only Ironic virtualenv (tools/ironic-venv.sh)."
        echo "# Resolved by pip for ironic==$IRONIC_VERSION; regenerate with"
        echo "#   tools/ironic-venv.sh --refresh-constraints"
        "$venv/bin/pip" freeze --exclude ironic
    } > "$constraints"
    stamp_text="ironic==$IRONIC_VERSION $(sha256sum "$constraints" | cut -d' ' -f1)"
else
    "$venv/bin/pip" install --quiet -c "$constraints" "ironic==$IRONIC_VERSION"
fi
"$venv/bin/python" -W ignore -c "import ironic.command.singleprocess" >/dev/null
echo "$stamp_text" > "$stamp"
echo "ironic venv created: $venv (ironic $IRONIC_VERSION) in $(( $(date +%s) - start )) s"
