package detect

import "golang.org/x/sys/unix"

// Filesystem magic numbers (statfs f_type) of filesystems where inotify
// reports only the changes made through this host's kernel.
var remoteFilesystems = map[int64]string{
	0x6969:     "NFS",
	0x65735546: "FUSE",
	0x0bd00bd0: "Lustre",
	0xff534d42: "CIFS",
	0xfe534d42: "SMB2",
	0x01021997: "9p",
	0x47504653: "GPFS",
	0x00c36400: "CephFS",
}

// remoteFS names the filesystem holding dir when it is one whose writes
// from other hosts produce no events, or returns "".
func remoteFS(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return ""
	}
	return remoteFilesystems[int64(st.Type)]
}
