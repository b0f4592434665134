package safepath

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxStateFile bounds what ReadFile reads: the agent's state files are
// small (a journal of 4,096 steps is a few MB).
const MaxStateFile = 256 << 20

// ErrNotRegular is returned (wrapped) by ReadFile for a link, FIFO,
// device or folder where a state file was expected.
var ErrNotRegular = errors.New("not a regular file (links are not followed)")

// ReadFile reads the state file at path without following a link in its
// last component (the folders above it are checked by MkdirAll), and
// without blocking on a FIFO. A missing file is fs.ErrNotExist.
func ReadFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|oNoFollow|oNonBlock, 0)
	if err != nil {
		if isLoop(err) {
			return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	raw, err := io.ReadAll(io.LimitReader(f, MaxStateFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(raw) > MaxStateFile {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a state file ferry wrote", path, MaxStateFile)
	}
	return raw, nil
}

// DecodeError describes why a state file did not decode without quoting
// any of its bytes: a file linked or copied in place of the state (the
// first line of /etc/shadow) must not reach a log or a terminal.
func DecodeError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not valid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("a value of the wrong type at byte %d", typ.Offset)
	case err == nil:
		return "an unknown version"
	}
	return "not a state file ferry wrote"
}
