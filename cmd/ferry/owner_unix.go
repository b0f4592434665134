//go:build unix

package main

import (
	"os"
	"syscall"

	"go.uber.org/zap"
)

// warnOthersFolder warns when a restore's target folder already exists and
// belongs to another user who is not root: that user can replace the
// restored files between the restore and the trainer's load (torch.load
// unpickles them: code run as the job's user). A predictable name in /tmp
// is the usual way in. Root restoring into a job's folder is not warned
// about, nor a folder root owns.
func warnOthersFolder(dir string, log *zap.Logger) {
	fi, err := os.Stat(dir)
	if err != nil {
		return
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	me := os.Geteuid()
	if !ok || me == 0 || st.Uid == 0 || int(st.Uid) == me {
		return
	}
	log.Warn("the restore's target folder belongs to another user, who can replace the restored files before they are loaded: restore into a folder of your own",
		zap.String("dir", dir), zap.Uint32("owner_uid", st.Uid))
}
