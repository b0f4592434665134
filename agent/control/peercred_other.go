//go:build !linux

package control

import "net"

// peerOf returns an unknown peer: this platform's credentials are not
// read, and the socket's file mode alone decides (Server.unknownPeer).
func peerOf(*net.UnixConn) (Peer, error) { return Peer{}, nil }

// fileOwner is not known here.
func fileOwner(any) (uid, gid uint32, ok bool) { return 0, 0, false }
