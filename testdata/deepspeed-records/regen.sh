#!/usr/bin/env bash
# Regenerates the DeepSpeed-shaped steps in this folder with torch 2.6 in
# the Debian 13 root (`make trixie` first; as root). See gen.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/examples/dcp/root.sh"
root_private "$@"
ROOT=${ROOT:-$repo/tools/trixie}
trap root_down EXIT
out=$(mktemp -d /tmp/deepspeed-records.XXXXXX)
root_up "$here" "$out"
in_root python3 "$here/gen.py" "$out"
rm -rf "$here/zero2-dp4" "$here/bf16-zero1-dp2-mp2" "$here/zero3-dp2" "$here/want.json"
cp -r "$out"/* "$here/"
rm -rf "$out"
echo "DeepSpeed records regenerated in $here"
