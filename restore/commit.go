package restore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"
)

// A step is placed as a whole. Each verified file waits beside its final
// path under its staged name; once every file of the step is verified,
// commit renames them into place: the other files first, then the
// symlinks, then the frameworks' markers (markers.go). A failure before
// that point removes the staged files and leaves every final path as it
// was; a failure during it takes back what was placed (the previous
// content of a replaced path is kept as a hard link until the end).
//
// A staged name is a temp name whose 16 hex digits are the start of the
// file's BLAKE3 rather than random ones: a restore killed before its
// commit leaves its verified files staged, and the next restore of the
// same step recognises them (removeStale), hashes them again and uses
// them rather than downloading them again.

// stagedFile is a verified file (or a temp symlink) waiting for commit.
type stagedFile struct {
	job  *fileJob // nil for a link
	link *linkJob
	// tmp is the staged (or temp link's) root-relative name, rel the
	// final one.
	tmp, rel string
	marker   bool
	// backup is a hard link to what rel held before commit replaced it,
	// "" when rel was empty (or the link could not be made).
	backup string
	placed bool
}

// stagedName is the name a verified copy of job waits under.
func stagedName(job *fileJob) string {
	name := tempName(filepath.Base(job.rel)) // shortened as temp names are
	return name[:len(name)-randLen-len(tempSuffix)] + stagedTag(job) + tempSuffix
}

// stagedTag is the part of a staged name taken from the file's hash.
func stagedTag(job *fileJob) string {
	if len(job.file.BLAKE3) < randLen {
		return "0000000000000000"
	}
	return job.file.BLAKE3[:randLen]
}

// addStaged records that job's verified copy waits at tmp.
func (r *restorer) addStaged(job *fileJob, tmp string) {
	r.mu.Lock()
	r.staged = append(r.staged, &stagedFile{job: job, tmp: tmp, rel: job.rel, marker: isMarker(job.rel)})
	r.mu.Unlock()
}

// resumeStaged reports whether job has a staged copy an interrupted
// restore left that still hashes right; it is then staged again (kept).
// A staged copy that does not is removed.
func (r *restorer) resumeStaged(ctx context.Context, job *fileJob) (bool, error) {
	if job.resume == "" {
		return false, nil
	}
	f, err := r.root.OpenFile(job.resume, os.O_RDONLY|openNonBlock, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Mode().IsRegular() && fi.Size() == job.file.Size {
		sum, err := r.hashFile(ctx, f, job.file.Size)
		if err != nil {
			return false, err
		}
		if sum == job.file.BLAKE3 {
			r.addStaged(job, job.resume)
			return true, nil
		}
	}
	r.root.Remove(job.resume)
	return false, nil
}

// discardStaged removes the staged files commit did not place.
func (r *restorer) discardStaged() {
	for _, s := range r.staged {
		if !s.placed {
			r.root.Remove(s.tmp)
		}
	}
}

// commit places the staged files, each with its recorded modification
// time (placedTime), then the links, then the markers, and sets the
// markers' times that tell an agent started on the folder that the step
// is whole (stampMarkers). On error it takes back what it placed.
func (r *restorer) commit(p *plan) (err error) {
	if err := r.stageLinks(p); err != nil {
		return err
	}
	order := slices.Clone(r.staged)
	// Markers last; among the rest, files before links.
	slices.SortStableFunc(order, func(a, b *stagedFile) int {
		return rankOf(a) - rankOf(b)
	})
	now := time.Now()
	defer func() {
		if err != nil {
			r.takeBack(order)
		}
	}()
	for _, s := range order {
		if s.job != nil && !s.marker {
			if err := r.root.Chtimes(s.tmp, now, placedTime(s.job.file, now)); err != nil {
				return fmt.Errorf("restore %s: set its time: %w", s.job.file.Path, err)
			}
		}
		if err := r.placeStaged(s); err != nil {
			return err
		}
	}
	for _, s := range order {
		if s.backup != "" {
			r.root.Remove(s.backup)
			s.backup = ""
		}
	}
	return r.stampMarkers(p, now)
}

// rankOf orders commit: files, links, markers.
func rankOf(s *stagedFile) int {
	switch {
	case s.marker:
		return 2
	case s.link != nil:
		return 1
	}
	return 0
}

// placeStaged renames one staged entry over its final path, keeping a
// hard link to what the path held so that takeBack can put it back.
func (r *restorer) placeStaged(s *stagedFile) error {
	var name string
	if s.job != nil {
		name = s.job.file.Path
	} else {
		name = s.link.link.Path
	}
	if _, err := r.root.Lstat(s.rel); err == nil {
		b := filepath.Join(filepath.Dir(s.rel), tempName(filepath.Base(s.rel)))
		if err := r.root.Link(s.rel, b); err == nil {
			s.backup = b
		} else {
			r.log.Debug("no hard link to keep the previous file until the step is placed", zap.String("path", name), zap.Error(err))
		}
	}
	if err := r.root.Rename(s.tmp, s.rel); err != nil {
		if s.backup != "" {
			r.root.Remove(s.backup)
			s.backup = ""
		}
		return fmt.Errorf("restore %s: %w", name, err)
	}
	s.placed = true
	r.addSyncDir(filepath.Dir(s.rel))
	return nil
}

// takeBack undoes a commit that failed: each placed entry is replaced by
// what its path held before, or removed if it held nothing.
func (r *restorer) takeBack(order []*stagedFile) {
	for i := len(order) - 1; i >= 0; i-- {
		s := order[i]
		switch {
		case s.placed && s.backup != "":
			if err := r.root.Rename(s.backup, s.rel); err != nil {
				r.log.Warn("could not put back the previous file", zap.String("path", s.rel), zap.Error(err))
			}
		case s.placed:
			r.root.Remove(s.rel)
		case s.backup != "":
			r.root.Remove(s.backup)
		}
		s.placed = false
	}
}

// stageLinks creates each manifest symlink to replace under a temp name,
// staged for commit.
func (r *restorer) stageLinks(p *plan) error {
	for i := range p.links {
		l := &p.links[i]
		if l.keep {
			continue
		}
		tmp := filepath.Join(filepath.Dir(l.rel), tempName(filepath.Base(l.rel)))
		if err := r.root.Symlink(l.link.Target, tmp); err != nil {
			return fmt.Errorf("symlink %s: %w", l.link.Path, err)
		}
		r.staged = append(r.staged, &stagedFile{link: l, tmp: tmp, rel: l.rel})
	}
	return nil
}
