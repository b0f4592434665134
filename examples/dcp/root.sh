# Sourced by the scripts in this folder: run torch 2.6 inside the Debian 13
# root that `make trixie` builds, while ferry runs outside on the same
# folders. root_up binds /proc, /sys, /dev, /dev/shm and the given host
# folders (at the same paths, so a path means the same file inside and
# out) into the root; root_down unmounts them, newest first, and is safe to
# call twice: call it from an EXIT trap. The caller runs in a private mount
# namespace (root_private), so even a SIGKILLed scenario leaves no mount
# behind on the host.
#
#   root_private "$@"          # first line of the script: re-exec under unshare -m
#   ROOT=tools/trixie root_up /tmp/work "$here"
#   in_root python3 "$here/train.py" ...
#   root_down

root_mounts=()
root_made=() # mount points root_bind created, removed again by root_down

# root_private ARGS: re-run the calling script in a mount namespace of its
# own (mounts there propagate nowhere and die with it).
root_private() {
	if [ -z "${FERRY_ROOT_NS:-}" ]; then
		[ "$(id -u)" = 0 ] || { echo "FAIL: $0 needs root (mount namespace, bind mounts, chroot): run it with sudo" >&2; exit 1; }
		command -v unshare >/dev/null || { echo "FAIL: unshare (util-linux) not found" >&2; exit 1; }
		FERRY_ROOT_NS=1 exec unshare --mount --propagation private -- "$0" "$@"
	fi
}

root_bind() { # src dst [extra mount flags]
	local src=$1 dst=$2
	[ -d "$dst" ] || { mkdir -p "$dst" && root_made+=("$dst"); }
	mount --bind "$src" "$dst" || { echo "FAIL: mount --bind $src $dst" >&2; return 1; }
	root_mounts+=("$dst")
}

root_up() { # FOLDER...: bind the system folders and FOLDERs into $ROOT
	: "${ROOT:?ROOT is the trixie root (make trixie)}"
	[ -f "$ROOT/.ferry-stamp" ] || { echo "FAIL: no trixie root at $ROOT: run make trixie (as root)" >&2; return 1; }
	[ "$(id -u)" = 0 ] || { echo "FAIL: chroot into $ROOT needs root" >&2; return 1; }
	local d
	for d in /proc /sys /dev /dev/shm; do root_bind "$d" "$ROOT$d" || return 1; done
	for d in "$@"; do root_bind "$d" "$ROOT$d" || return 1; done
}

root_down() { # unmount what root_up mounted, newest first
	local i
	for ((i = ${#root_mounts[@]} - 1; i >= 0; i--)); do
		umount "${root_mounts[$i]}" 2>/dev/null || umount -l "${root_mounts[$i]}" 2>/dev/null || true
	done
	root_mounts=()
	for ((i = ${#root_made[@]} - 1; i >= 0; i--)); do
		rmdir "${root_made[$i]}" 2>/dev/null || true # only the folder, only if empty
	done
	root_made=()
}

# in_root CMD...: CMD inside the root, at low CPU priority (the machine is
# shared), with Python's output unbuffered. in_root_exec replaces the
# calling (sub)shell with it: `in_root_exec CMD &` makes $! the pid of CMD
# itself, the launcher whose process group a SIGKILL ends.
root_env=(/usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8
	PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore)
in_root() { nice -n 10 chroot "$ROOT" "${root_env[@]}" "$@"; }
in_root_exec() { exec nice -n 10 chroot "$ROOT" "${root_env[@]}" "$@"; }
