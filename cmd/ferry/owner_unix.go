//go:build unix

package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"go.uber.org/zap"
)

// warnOthersFolder warns, for every caller root included, when another
// user could replace the restored files between the restore and the
// trainer's load (torch.load unpickles them: code run as the job's user):
// the target folder or any existing folder above it belongs to another
// user (not root) or is writable by group or others (a root-owned sticky
// folder such as /tmp excepted), or a link on the path belongs to another
// user. A predictable name in /tmp is the usual way in.
func warnOthersFolder(dir string, log *zap.Logger) {
	for _, r := range pathRisks(dir, os.Geteuid(), os.Getegid()) {
		msg := "a folder or link on the restore's path can be changed by another user, who can replace the restored files before they are loaded: restore into a folder of your own"
		if r.target {
			msg = "the restore's target folder belongs to another user, who can replace the restored files before they are loaded: restore into a folder of your own"
		}
		log.Warn(msg, zap.String("path", r.path), zap.String("why", r.why))
	}
}

// pathRisk is one folder or link on a restore's path that another user
// can change.
type pathRisk struct {
	path, why string
	target    bool // the target folder itself, owned by another user
}

// pathRisks lists what on the path to dir (every existing component, each
// looked at without following it) a user other than me and root could
// change; myGroup's write bit is not counted (a user's private group).
func pathRisks(dir string, me, myGroup int) []pathRisk {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	var out []pathRisk
	cur := "/"
	parts := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	for i, name := range append([]string{""}, parts...) {
		cur = filepath.Join(cur, name)
		fi, err := os.Lstat(cur)
		if err != nil {
			break // what does not exist yet, the restore creates
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if why := riskOf(fi.Mode(), int(st.Uid), int(st.Gid), me, myGroup); why != "" {
			target := i == len(parts) && fi.IsDir() && int(st.Uid) != me && st.Uid != 0
			out = append(out, pathRisk{path: cur, why: why, target: target})
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			break // beyond a link the path names another's folders
		}
	}
	return out
}

// riskOf says why a component with mode, owner uid and group gid can be
// changed by a user other than me and root, or "".
func riskOf(mode fs.FileMode, uid, gid, me, myGroup int) string {
	other := uid != me && uid != 0
	switch {
	case mode&fs.ModeSymlink != 0:
		if other {
			return fmt.Sprintf("a symbolic link owned by uid %d", uid)
		}
		return ""
	case other:
		return fmt.Sprintf("owned by uid %d", uid)
	case mode&fs.ModeSticky != 0 && uid == 0:
		return "" // /tmp: others cannot rename what is not theirs
	case mode.Perm()&0o002 != 0:
		return fmt.Sprintf("writable by others (mode %04o)", mode.Perm())
	case mode.Perm()&0o020 != 0 && gid != myGroup:
		return fmt.Sprintf("writable by group %d (mode %04o)", gid, mode.Perm())
	}
	return ""
}
