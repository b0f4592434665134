#!/usr/bin/env bash
# Regenerates the real DCP steps in this folder with torch 2.6 in the
# Debian 13 root (`make trixie` first; as root). See gen.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/examples/dcp/root.sh"
root_private "$@"
ROOT=${ROOT:-$repo/tools/trixie}
trap root_down EXIT
out=$(mktemp -d /tmp/dcp-records.XXXXXX)
root_up "$here" "$out"
in_root python3 "$here/gen.py" "$out"
rm -rf "$here/world2" "$here/world4-threads2" "$here/single"
cp -r "$out"/* "$here/"
rm -rf "$out"
echo "DCP records regenerated in $here"
