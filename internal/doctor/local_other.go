//go:build !linux

package doctor

func remoteFilesystem(string) bool { return false }

func diskSpace(string) (free, total int64, name string) { return 0, 0, "unknown" }

func filesystemCheck(dir string, poll bool) Result {
	return warn("filesystem", "", "not checked on this platform")
}

func inotifyCheck(string, bool) Result { return skip("inotify", "Linux only") }

func leaseCheck(string, bool) Result { return skip("leases", "Linux only") }
