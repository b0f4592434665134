#!/usr/bin/env bash
# Regenerate the recordings here: each save of record.py run in the torch
# 2.6 Debian root (make trixie; python3-torch-ignite for ignite) under the
# host's strace, converted by convert.py into the trace op vocabulary.
#
#   sudo ROOT=tools/trixie testdata/saveorders/recorded/record.sh [NAME...]
#
# NAME is one of torch-dcp-save torch-dcp-async-save torch-save
# ignite-disksaver (default: all). Writes NAME.ops beside this script and
# keeps the raw strace output in NAME.strace only with KEEP=1. The Go test
# agent TestTraceRecordings compares each with the hand-written trace of
# the same name.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
# shellcheck source=../../../examples/dcp/root.sh
. "$repo/examples/dcp/root.sh"
root_private "$@"
ROOT=$(readlink -f "${ROOT:-$repo/tools/trixie}")
command -v strace >/dev/null || { echo "FAIL: strace not found (apt-get install strace)" >&2; exit 1; }

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(torch-dcp-save torch-dcp-async-save torch-save ignite-disksaver)
work=$(mktemp -d -t ferry-record.XXXXXX)
trap 'root_down; rm -rf "$work"' EXIT
root_up "$work" "$here"

for name in "${names[@]}"; do
	case $name in
	torch-dcp-save) mode=dcp-save ;;
	torch-dcp-async-save) mode=dcp-async-save ;;
	torch-save) mode=torch-save ;;
	ignite-disksaver) mode=ignite ;;
	*) echo "FAIL: unknown recording $name" >&2; exit 1 ;;
	esac
	dir=$work/$name/ckpt log=$work/$name/log
	mkdir -p "$dir" "$log"
	echo "recording $name (record.py $mode)"
	strace -f -qq -s 256 -e trace=%file,write,writev,pwrite64,close,clone,clone3,fork,vfork -o "$work/$name.strace" \
		chroot "$ROOT" "${root_env[@]}" python3 "$here/record.py" "$mode" "$dir" "$log" >"$work/$name.log" 2>&1 ||
		{ tail -n 20 "$work/$name.log" >&2; exit 1; }
	python3 "$here/convert.py" --watch "$dir" --log "$log" --name "$name" \
		--about "record.py $mode, torch $(in_root python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)" \
		"$work/$name.strace" >"$here/$name.ops"
	[ "${KEEP:-0}" = 1 ] && cp "$work/$name.strace" "$here/$name.strace"
	echo "  $(grep -vc '^#' "$here/$name.ops") operations -> $here/$name.ops"
done
