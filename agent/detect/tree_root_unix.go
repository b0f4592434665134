//go:build unix

package detect

import "syscall"

// openDirFlag makes a listing's open fail on anything but a folder.
const openDirFlag = syscall.O_DIRECTORY
