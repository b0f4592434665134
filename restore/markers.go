package restore

import (
	"fmt"
	"path/filepath"
	"time"
)

// A restored step must look finished to an agent started on its folder
// (agent/detect): the framework's marker, written by the trainer after the
// bytes it vouches for, must not be older than any of them (requireFresh,
// proof.go), and a DCP folder must not change after its .metadata arrived
// (requireSettledFolder). So commit places the markers last, gives every
// file it placed the same modification time, and then stamps each marker
// of the step, placed or kept, with that time or the newest time of a kept
// file if later: that last change also makes the marker's change time the
// newest event of its folder.

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

// stampMarkers sets each marker file of the plan to the newest time of the
// step's files, at least now.
func (r *restorer) stampMarkers(p *plan, now time.Time) error {
	var markers []*fileJob
	newest := now
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
		if err := r.root.Chtimes(job.rel, newest, newest); err != nil {
			return fmt.Errorf("restore %s: set its time: %w", job.file.Path, err)
		}
	}
	return nil
}
