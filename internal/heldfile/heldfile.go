// Package heldfile names a file of a step already on local disk: what a restore
// keeps in place and what the agent's last committed step holds, both
// offered to other nodes restoring that step (internal/peer). It lives
// apart so that agent, restore and peer share it without agent importing
// restore.
package heldfile

import "github.com/ferrylabs/ferry/manifest"

// File is a file of the manifest already in a local directory.
type File struct {
	File manifest.File
	// Path is where it is, relative to the directory.
	Path string
	// ModTime, when not 0, is the modification time (Unix nanoseconds)
	// the file must still have to be served: the agent's, as committed.
	ModTime int64
}
