package control

import (
	"fmt"
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
		perm := fi.Mode().Perm()
		var bits os.FileMode
		switch {
		case p.UID == uid:
			return nil // the owner may chmod it and read it anyway
		case p.InGroup(gid):
			bits = perm >> 3 & 0o7
		default:
			bits = perm & 0o7
		}
		if bits&0o5 == 0o5 {
			return nil
		}
		return refused
	}
}
