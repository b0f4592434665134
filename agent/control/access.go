package control

import (
	"context"
	"fmt"
	"io/fs"
	"os"
)

// WatchReaders answers root, the agent's own user, and the users who may
// read the watch dir dir (list it and open what is in it: read and search
// permission), decided as the kernel decides for the caller's uid, gid and
// supplementary groups: the owner class by the owner, a member of the
// dir's group by the group bits, anyone else by the other bits. Its mode
// is looked at on every request, so a chmod takes effect at once. Anyone
// else learns nothing of the steps, their files or the watch dir's path:
// sharing the control group (--control-group) lets a user open the
// socket, never see or drive another user's checkpoints.
func WatchReaders(dir string) Authorizer {
	return func(p Peer) error {
		if OwnerOnly(p) == nil {
			return nil
		}
		refused := fmt.Errorf("user %d may not use this agent: only root, the agent's user (uid %d) and users who can read its watch dir are answered", p.UID, os.Geteuid())
		fi, err := os.Stat(dir)
		if err != nil {
			return refused
		}
		uid, gid, ok := fileOwner(fi.Sys())
		if !ok {
			return refused
		}
		if p.UID == uid || p.Allows(uid, gid, fi.Mode().Perm(), 0o5) {
			return nil // the owner may chmod it and read it anyway
		}
		return refused
	}
}

// Allows reports whether the permission bits perm of a file that uid and
// gid own grant p every right in want (read 4, write 2, search 1), as the
// kernel's check reads them: the owner class for the owner, the group
// class for a member of the file's group, the other class for anyone
// else; root passes. ACLs are not read: a right only an ACL grants is
// refused here, never the other way round.
func (p Peer) Allows(uid, gid uint32, perm, want fs.FileMode) bool {
	var bits fs.FileMode
	switch {
	case p.UID == 0:
		return true
	case p.UID == uid:
		bits = perm >> 6 & 0o7
	case p.InGroup(gid):
		bits = perm >> 3 & 0o7
	default:
		bits = perm & 0o7
	}
	return bits&want == want
}

// CallerOf returns the caller of the control request whose context ctx
// is (or derives from), as the kernel named it when it connected; false
// outside a control request (the agent's own calls, tests).
func CallerOf(ctx context.Context) (Peer, bool) {
	pr, ok := ctx.Value(peerKey{}).(peerResult)
	if !ok || pr.err != nil {
		return Peer{}, false
	}
	return pr.p, true
}
