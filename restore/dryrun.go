package restore

import (
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
// those that are.
func (p *plan) split() (fetch []manifest.File, held []HeldFile) {
	for _, j := range p.files {
		if !j.absent {
			if fi, err := os.Lstat(filepath.Join(p.root, j.rel)); err == nil && fi.Mode().IsRegular() && fi.Size() == j.file.Size {
				held = append(held, HeldFile{File: j.file, Path: j.rel})
				continue
			}
		}
		fetch = append(fetch, j.file)
	}
	return fetch, held
}

// summarize looks at what the target directory holds for each planned
// file, without reading any file's content.
func summarize(p *plan, chunk int64) Plan {
	var s Plan
	s.Symlinks = len(p.links)
	for _, j := range p.files {
		gets := int64(chunks(j.file.Size, chunk))
		if !j.absent {
			if fi, err := os.Lstat(filepath.Join(p.root, j.rel)); err == nil && fi.Mode().IsRegular() && fi.Size() == j.file.Size {
				s.Present++
				s.PresentBytes += j.file.Size
				s.PresentGETs += gets
				continue
			}
		}
		s.Download++
		s.DownloadBytes += j.file.Size
		s.GETs += gets
	}
	return s
}
