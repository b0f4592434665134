//go:build !linux

package detect

import (
	"errors"
	"os"
	"time"

	"github.com/ferrylabs/ferry/internal/confine"
)

// closeWatch is Linux-only; elsewhere the settle window decides.
type closeWatch struct{}

func startCloseWatch(*closeTracker) (*closeWatch, error) {
	return nil, errors.New("close-write detection needs Linux inotify")
}

func (*closeWatch) add(*os.File, string) error { return nil }
func (*closeWatch) run(chan<- struct{}) error  { return nil }
func (*closeWatch) close() error               { return nil }
func idOf(os.FileInfo) (fileID, bool)          { return fileID{}, false }
func changeTime(os.FileInfo) time.Time         { return time.Time{} }

// openForWriting cannot tell here: the settle window decides.
func openForWriting(*confine.Dir, string) (bool, error) {
	return true, errors.New("read leases need Linux")
}
