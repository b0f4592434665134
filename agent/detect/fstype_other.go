//go:build !linux

package detect

// remoteFS is not implemented outside Linux.
func remoteFS(string) string { return "" }
