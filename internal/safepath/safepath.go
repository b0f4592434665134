package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// ErrUnsafe is returned (wrapped) when a folder on the path could be
// replaced by a user other than the process's own and root.
var ErrUnsafe = errors.New("not safe for private state")

// Problem says why a path is not trusted: the first folder that fails,
// and the reason in a few words, without anything read from a file.
type Problem struct {
	Path   string // the folder or link at fault
	Reason string // e.g. "writable by others (mode 0777)"
	Fix    string // one remedy
}

func (p *Problem) Error() string {
	return fmt.Sprintf("%s: %s: %s (%s)", p.Path, ErrUnsafe.Error(), p.Reason, p.Fix)
}

// Unwrap makes errors.Is(err, ErrUnsafe) hold.
func (p *Problem) Unwrap() error { return ErrUnsafe }

// components splits the absolute, cleaned path into its folder names.
func components(path string) (string, []string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, fmt.Errorf("state dir %s: %w", path, err)
	}
	rel := strings.TrimPrefix(abs, string(filepath.Separator))
	if rel == "" {
		return abs, nil, nil
	}
	return abs, strings.Split(rel, string(filepath.Separator)), nil
}

// verdict is what one folder's owner and mode say about it.
func verdict(path string, uid, owner uint32, mode fs.FileMode, last bool) *Problem {
	fix := "chown it to the agent's user or root and chmod go-w it, or give --state-dir a folder of the agent's own (under $HOME or /var/lib)"
	if owner != uid && owner != 0 {
		return &Problem{Path: path, Reason: fmt.Sprintf("owned by uid %d, neither the agent's user (%d) nor root", owner, uid), Fix: fix}
	}
	if mode.Perm()&0o022 == 0 {
		return nil
	}
	if !last && owner == 0 && mode&fs.ModeSticky != 0 {
		return nil // /tmp: its users cannot rename what is not theirs
	}
	return &Problem{Path: path, Reason: fmt.Sprintf("writable by group or others (mode %04o)", mode.Perm()), Fix: fix}
}
