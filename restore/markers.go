package restore

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/ferrylabs/ferry/manifest"
)

// A restored step must look finished to an agent started on its folder
// (agent/detect): the framework's marker, written by the trainer after the
// bytes it vouches for, must not be older than any of them (requireFresh,
// proof.go), and a DCP folder must not change after its .metadata arrived
// (requireSettledFolder). So commit places the markers last and gives
// every file it places the modification time its manifest records (format
// 1.4: the time the writer hashed it under), or the time of the commit
// when the manifest records none (older writers, files ferry synthesised)
// or one later than that (a writer's clock ahead of ours: a file must not
// look written in the future). Files it keeps, already correct, keep their
// own times. It then stamps each marker of the step, placed or kept, with
// that time or, if later, the newest time of the step's other files on
// disk: in a real save the marker is newest already and keeps its time,
// while a save that wrote files after its marker (the HF Trainer's RNG
// states up to transformers 4.35, see agent/detect/hf.go) or a kept file
// newer than the save moves the marker up to them. That last change also
// makes the marker's change time the newest event of its folder. A node
// that restores the step it holds (the README's recipe runs restore at
// every start) thus changes no file's time, and its agent's journal still
// recognises the step it committed.

// markerNames are the files frameworks write last to say a step is
// complete, as agent/detect reads them: DCP's .metadata (dcp.go),
// DeepSpeed's latest (deepspeed.go), the HF Trainer's trainer_state.json
// (hf.go) and Megatron's tracker (megatron.go).
var markerNames = map[string]bool{
	".metadata":                         true,
	"latest":                            true,
	"trainer_state.json":                true,
	"latest_checkpointed_iteration.txt": true,
}

// isMarker reports whether the root-relative path names a marker.
func isMarker(rel string) bool {
	return markerNames[filepath.Base(rel)]
}

// placedTime is the modification time commit gives f: its recorded time,
// or now when the manifest records none or one later than now.
func placedTime(f manifest.File, now time.Time) time.Time {
	if t := f.MTime.Time(); f.MTime.Recorded() && !t.After(now) {
		return t
	}
	return now
}

// stampMarkers sets each marker file of the plan to its own time (its
// placedTime if commit placed it, its time on disk if kept) or to the
// newest time of the step's other files if that is later.
func (r *restorer) stampMarkers(p *plan, now time.Time) error {
	placed := map[*fileJob]bool{}
	for _, s := range r.staged {
		if s.job != nil && s.placed {
			placed[s.job] = true
		}
	}
	var markers []*fileJob
	var newest time.Time
	for i := range p.files {
		job := &p.files[i]
		if isMarker(job.rel) {
			markers = append(markers, job)
			continue
		}
		if fi, err := r.root.Lstat(job.rel); err == nil && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	for _, job := range markers {
		t := placedTime(job.file, now)
		if !placed[job] {
			fi, err := r.root.Lstat(job.rel)
			if err != nil {
				return fmt.Errorf("restore %s: %w", job.file.Path, err)
			}
			t = fi.ModTime()
		}
		if newest.After(t) {
			t = newest
		}
		if err := r.root.Chtimes(job.rel, now, t); err != nil {
			return fmt.Errorf("restore %s: set its time: %w", job.file.Path, err)
		}
	}
	return nil
}
