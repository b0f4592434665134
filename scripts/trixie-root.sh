#!/usr/bin/env bash
# Build the Debian 13 (trixie) root in which the modern-PyTorch e2e
# scenarios run torch 2.6 (examples/dcp): debootstrap --variant=minbase from
# the Debian mirror this machine's apt uses, then python3-torch,
# python3-numpy, python3-safetensors, libopenblas0-pthread (without it
# torch falls back to the reference BLAS, about 11x slower) and
# python3-torch-ignite (PyTorch Ignite, whose DiskSaver
# testdata/saveorders/recorded records). Run as root through `make
# trixie`; the stamp file makes it a one-time cost (about 2 minutes and
# 1.7 GB). A root built before a package joined the list gets the missing
# ones installed into it, without a rebuild. Usage: trixie-root.sh ROOT
set -euo pipefail
root=${1:?usage: trixie-root.sh ROOT}
stamp=$root/.ferry-stamp
packages="python3-torch python3-numpy python3-safetensors libopenblas0-pthread python3-torch-ignite"

# missing: the packages of the list that ROOT lacks.
missing() {
	local p out=""
	for p in $packages; do
		chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || out="$out $p"
	done
	echo "$out"
}

if [ -f "$stamp" ]; then
	[ "$(id -u)" = 0 ] || { echo "trixie root ready: $root (not checked for missing packages: that needs root)"; exit 0; }
	add=$(missing)
	[ -z "$add" ] && { echo "trixie root ready: $root"; exit 0; }
	echo "trixie root $root lacks$add: installing"
	(
		unshare --mount --propagation private -- sh -c '
			root=$1; shift
			mount -t proc proc "$root/proc"
			cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
			chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
			chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" &&
			chroot "$root" apt-get clean' sh "$root" $add
	) >"$root.install.log" 2>&1 || { tail -n 20 "$root.install.log" >&2; exit 1; }
	rm -f "$root.install.log"
	add=$(missing)
	[ -z "$add" ] || { echo "trixie root $root still lacks$add" >&2; exit 1; }
	echo "trixie root ready: $root"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "building the trixie root needs root (debootstrap, chroot): run make trixie as root" >&2; exit 1; }

# The mirror apt already uses here (deb822 or one-line sources).
mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null)
mirror=${mirror:-http://deb.debian.org/debian}

if ! command -v debootstrap >/dev/null; then
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
fi

# A half-built root from an interrupted try is started over.
[ -d "$root" ] && rm -rf --one-file-system "$root"
mkdir -p "$(dirname "$root")"
tmp=$root.building
rm -rf --one-file-system "$tmp"
start=$SECONDS
echo "debootstrap --variant=minbase trixie $tmp $mirror"
debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$tmp.log" 2>&1 || { tail -n 20 "$tmp.log" >&2; exit 1; }
echo "  base root in $((SECONDS - start))s; installing $packages"
# apt inside needs /proc; nothing else of the host is bound while building.
mount -t proc proc "$tmp/proc"
trap 'umount "$tmp/proc" 2>/dev/null || true' EXIT
cp /etc/resolv.conf "$tmp/etc/resolv.conf" 2>/dev/null || true
chroot "$tmp" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$tmp.log" 2>&1
chroot "$tmp" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $packages >>"$tmp.log" 2>&1 ||
	{ tail -n 20 "$tmp.log" >&2; exit 1; }
chroot "$tmp" apt-get clean
chroot "$tmp" /usr/bin/python3 -c 'import torch, numpy, safetensors, ignite; print("  torch", torch.__version__, "numpy", numpy.__version__, "ignite", ignite.__version__)' 2>&1 | grep torch
umount "$tmp/proc"
trap - EXIT
mv "$tmp" "$root"
rm -f "$tmp.log"
date -u +%FT%TZ >"$stamp"
echo "trixie root ready in $((SECONDS - start))s: $root ($(du -sh --one-file-system "$root" | cut -f1))"
