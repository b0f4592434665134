package uploader

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/internal/step"
)

// openStepDir opens the directory a step's files are read beneath (nil
// when the step names none: each file is then read beneath its own
// folder).
func openStepDir(s step.Step) (*confine.Dir, error) {
	if s.Dir == "" {
		return nil, nil
	}
	return confine.Open(s.Dir)
}

// closeDir closes d, if any.
func closeDir(d *confine.Dir) {
	if d != nil {
		d.Close()
	}
}

// where returns the directory f is read beneath and its path there: f.Dir
// and RelPath, or LocalPath's folder (opened here; close it) and name.
func (f File) where() (d *confine.Dir, rel string, opened bool, err error) {
	if f.Dir != nil {
		return f.Dir, f.RelPath, false, nil
	}
	d, err = confine.Open(filepath.Dir(f.LocalPath))
	return d, filepath.Base(f.LocalPath), true, err
}

// openBeneath opens f for reading beneath its directory, following no
// link, and returns what fstat says of it: a regular file with one link.
func (f File) openBeneath() (*os.File, confine.Stat, error) {
	d, rel, opened, err := f.where()
	if err != nil {
		return nil, confine.Stat{}, err
	}
	if opened {
		defer d.Close()
	}
	return d.OpenRegular(rel)
}

// open opens f as openBeneath does and checks that it is the file the
// scan saw (f.Seen): same device and inode, size and mtime. Another file
// (a folder or file swapped since, or rewritten) is ErrFileChanged: the
// watcher reports the step again as it is now.
func (f File) open() (*os.File, fileStamp, confine.Stat, error) {
	fh, st, err := f.openBeneath()
	if err != nil {
		return nil, fileStamp{}, confine.Stat{}, err
	}
	if err := f.sameAsSeen(st); err != nil {
		fh.Close()
		return nil, fileStamp{}, confine.Stat{}, err
	}
	return fh, stampOf(st), st, nil
}

// sameAsSeen returns an error unless st is the file f.Seen describes.
func (f File) sameAsSeen(st confine.Stat) error {
	s := f.Seen
	if s == nil {
		return nil
	}
	if s.Ino != 0 && (s.Dev != st.Dev || s.Ino != st.Ino) {
		return fmt.Errorf("%w: %s is not the file scanned (another device and inode): not read", ErrFileChanged, f.LocalPath)
	}
	if !s.ModTime.IsZero() && (s.Size != st.Size || !s.ModTime.Equal(st.ModTime)) {
		return fmt.Errorf("%w since it was scanned (size %d -> %d): %s", ErrFileChanged, s.Size, st.Size, f.LocalPath)
	}
	return nil
}

// reopen opens f again (a pack's body, its second read) and checks that it
// is the file opened before, st, unchanged.
func (f File) reopen(st confine.Stat) (*os.File, error) {
	fh, now, err := f.openBeneath()
	if err != nil {
		return nil, err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino || stampOf(now) != stampOf(st) {
		fh.Close()
		return nil, changed(stampOf(st), stampOf(now))
	}
	return fh, nil
}

// stat returns the stamp of f as it is now, without following a link.
func (f File) stat() (fileStamp, error) {
	d, rel, opened, err := f.where()
	if err != nil {
		return fileStamp{}, err
	}
	if opened {
		defer d.Close()
	}
	st, err := d.Lstat(rel)
	if err != nil {
		return fileStamp{}, err
	}
	if !st.IsRegular() {
		return fileStamp{}, fmt.Errorf("%s is not a regular file", f.LocalPath)
	}
	return stampOf(st), nil
}

func stampOf(st confine.Stat) fileStamp {
	return fileStamp{Size: st.Size, ModTime: st.ModTime.UnixNano()}
}
