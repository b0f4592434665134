package confine

import (
	"io/fs"
	"strings"
)

// Owner is who owns a file and its permission bits: what the kernel's
// permission check reads, for deciding what another user may see of the
// directory (a control request's caller, who may have fewer rights than
// ferry).
type Owner struct {
	UID, GID uint32
	Perm     fs.FileMode // permission bits only
	// Known is false where the platform does not give them.
	Known bool
}

// LstatOwner is Lstat with the file's owner and permission bits.
func (d *Dir) LstatOwner(rel string) (Stat, Owner, error) { return d.lstatOwner(rel) }

// Reachable reports whether rel exists beneath the directory, reached
// without a link, and may allows each step of the way: every folder on
// the way (last false) and rel itself (last true), as lstat sees them.
// A path that is missing and one that may refuses are the same false.
func (d *Dir) Reachable(rel string, may func(st Stat, o Owner, last bool) bool) bool {
	parts, err := split(rel)
	if err != nil {
		return false
	}
	for i := range parts {
		st, o, err := d.lstatOwner(strings.Join(parts[:i+1], "/"))
		if err != nil || !may(st, o, i == len(parts)-1) {
			return false
		}
	}
	return len(parts) > 0
}
