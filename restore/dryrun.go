package restore

import (
	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/manifest"
	"os"
	"path/filepath"
)

// Plan is what a restore would do, reported with Options.PlanOnly
// (restore --dry-run): nothing is fetched and nothing written.
type Plan struct {
	// Download counts the files to fetch: absent, or of another size.
	Download      int   `json:"download"`
	DownloadBytes int64 `json:"download_bytes"`
	// Present counts the files already in place with the manifest's size:
	// the restore re-verifies them by their BLAKE3, keeps those that match
	// and fetches the others.
	Present      int   `json:"present"`
	PresentBytes int64 `json:"present_bytes"`
	// GETs is the ranged GETs the download takes, without retries (the
	// present files' included if they turn out to differ: PresentGETs).
	GETs        int64 `json:"gets"`
	PresentGETs int64 `json:"present_gets"`
	// Symlinks is the links the restore places.
	Symlinks int `json:"symlinks"`
}

// split returns the planned files not already in place with the
// manifest's size, in plan order (those the restore will download), and
// those that are, for the peers: packed files are left out of both, as
// they are always read from the bucket.
func (p *plan) split() (fetch []manifest.File, held []heldfile.File) {
	for _, j := range p.files {
		switch {
		case j.file.Packed():
			// read from the bucket, never from peers
		case p.inPlace(&j):
			held = append(held, heldfile.File{File: j.file, Path: j.rel})
		default:
			fetch = append(fetch, j.file)
		}
	}
	return fetch, held
}

// inPlace reports whether the target directory holds a regular file at
// j's path with the manifest's size (its content is not read).
func (p *plan) inPlace(j *fileJob) bool {
	if j.absent {
		return false
	}
	fi, err := os.Lstat(filepath.Join(p.root, j.rel))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == j.file.Size
}

// summarize looks at what the target directory holds for each planned
// file, without reading any file's content.
func summarize(p *plan, chunk int64) Plan {
	var s Plan
	s.Symlinks = len(p.links)
	count := func(j *fileJob, gets int64) {
		if p.inPlace(j) {
			s.Present++
			s.PresentBytes += j.file.Size
			s.PresentGETs += gets
			return
		}
		s.Download++
		s.DownloadBytes += j.file.Size
		s.GETs += gets
	}
	runs, single := packRuns(p.files, chunk)
	for _, i := range single {
		count(&p.files[i], int64(chunks(p.files[i].file.Size, chunk)))
	}
	// A run is one GET if any of its files is fetched; a present file of a
	// run that differs is fetched on its own.
	for _, u := range runs {
		get := int64(1)
		for _, j := range u.jobs {
			if p.inPlace(j) {
				count(j, 1)
				continue
			}
			count(j, get)
			get = 0
		}
	}
	return s
}
