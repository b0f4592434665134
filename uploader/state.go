package uploader

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"

	"github.com/ferrylabs/ferry/internal/safepath"
	"github.com/ferrylabs/ferry/internal/statefile"
)

// pendingUpload records one multipart upload in flight.
type pendingUpload struct {
	UploadID string    `json:"upload_id"`
	PartSize int64     `json:"part_size"`
	Stamp    fileStamp `json:"file"`
	// Early marks an upload started while the file was still being
	// written (Destination.SendEarly): Stamp is unknown, and Digests holds
	// the BLAKE3 subtree digest of each part sent, by part number. A push
	// keeps such a part only if the file's bytes there still hash to it.
	Early   bool             `json:"early,omitempty"`
	Digests map[int32]string `json:"digests,omitempty"`
	// Sent holds, by part number, the server's answer to each part sent
	// early, so that the push completes the upload without listing its
	// parts first: one round trip less between the trainer's last write
	// and the manifest.
	Sent map[int32]sentPart `json:"sent,omitempty"`
}

// sentPart is the server's answer to a part sent early.
type sentPart struct {
	ETag   string `json:"etag"`
	CRC32C string `json:"crc32c"`
}

// resumeState is a small JSON file recording the multipart uploads of one
// push in flight, and the attempt name of its objects, so that a push killed
// at any point (SIGKILL included) resumes where it stopped. Every change is
// written to a temp file and renamed, so the file is always whole. It is not
// fsynced: the state only saves work (what it records is on the server), so
// a power cut costs re-sending, never a wrong commit, while an fsync on the
// checkpoint's file system can wait behind the trainer's writeback, on the
// path between the trainer's last write and the manifest. The file is
// mirrored by internal/statefile: no lock held across the disk, saves
// ordered, and Delete ordered with them.
type resumeState struct {
	f *statefile.File[stateData]
}

type stateData struct {
	Version int `json:"version"`
	// Owner names what this state belongs to (destination, step, node); a
	// state whose owner differs is ignored, so stale files never mix.
	Owner   string                   `json:"owner"`
	Attempt string                   `json:"attempt"`
	Uploads map[string]pendingUpload `json:"uploads"`
	// Done records objects already written whole, so a resumed push neither
	// re-reads nor re-sends them.
	Done map[string]doneObject `json:"done"`
}

// doneObject records an object already uploaded whole to its key: a file
// (its stamp, BLAKE3 and part size), or a pack of small files (Stamp.Size
// alone: the pack's key names its members and their hashes).
type doneObject struct {
	Stamp    fileStamp `json:"file"`
	BLAKE3   string    `json:"blake3"`
	PartSize int64     `json:"part_size"`
}

// openResumeState loads the state file at path if it exists and belongs to
// owner; otherwise it starts an empty state with a new attempt name
// (newAttempt is called to make one). The file is created on the first
// change.
func openResumeState(path, owner string, newAttempt func() string) (*resumeState, error) {
	var data stateData
	raw, err := safepath.ReadFile(path)
	switch {
	case err == nil:
		if jerr := json.Unmarshal(raw, &data); jerr != nil || data.Version != 1 || data.Owner != owner || data.Attempt == "" {
			data = stateData{}
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("read upload state %s: %w", path, err)
	}
	if data.Attempt == "" {
		data = stateData{Version: 1, Owner: owner, Attempt: newAttempt()}
	}
	if data.Uploads == nil {
		data.Uploads = map[string]pendingUpload{}
	}
	if data.Done == nil {
		data.Done = map[string]doneObject{}
	}
	return &resumeState{f: statefile.New(path, "upload state", data, false)}, nil
}

// Attempt returns the attempt name recorded in the state.
func (s *resumeState) Attempt() (attempt string) {
	s.f.View(func(d *stateData) { attempt = d.Attempt })
	return attempt
}

// Get returns the upload recorded for key.
func (s *resumeState) Get(key string) (up pendingUpload, ok bool) {
	s.f.View(func(d *stateData) { up, ok = d.Uploads[key] })
	return up, ok
}

// Put records an upload for key and saves the state.
func (s *resumeState) Put(key string, up pendingUpload) error {
	return s.f.Update(func(d *stateData) { d.Uploads[key] = up })
}

// PutEarlyPart records that part n of the early upload for key was sent
// with bytes of the given digest and answered with sent, and saves the
// state.
func (s *resumeState) PutEarlyPart(key string, n int32, digest string, sent sentPart) error {
	return s.change(key, func(up *pendingUpload) {
		// New maps: copies handed out by Get and Uploads stay as they were.
		up.Digests, up.Sent = maps.Clone(up.Digests), maps.Clone(up.Sent)
		if up.Digests == nil {
			up.Digests = map[int32]string{}
		}
		if up.Sent == nil {
			up.Sent = map[int32]sentPart{}
		}
		up.Digests[n], up.Sent[n] = digest, sent
	})
}

// ForgetSent drops the server's answers recorded for the early upload of
// key (the server refused to complete the upload with them): the next
// push lists the parts instead.
func (s *resumeState) ForgetSent(key string) error {
	return s.change(key, func(up *pendingUpload) { up.Sent = nil })
}

// change applies fn to the upload recorded for key and saves the state.
func (s *resumeState) change(key string, fn func(*pendingUpload)) error {
	var found bool
	err := s.f.Update(func(d *stateData) {
		up, ok := d.Uploads[key]
		if found = ok; ok {
			fn(&up)
			d.Uploads[key] = up
		}
	})
	if !found {
		return fmt.Errorf("update the upload of %s: no upload recorded", key)
	}
	return err
}

// Remove forgets the upload for key and saves the state.
func (s *resumeState) Remove(key string) error {
	if _, ok := s.Get(key); !ok {
		return nil
	}
	return s.f.Update(func(d *stateData) { delete(d.Uploads, key) })
}

// Finish records that key was written whole, replacing its upload entry,
// and saves the state.
func (s *resumeState) Finish(key string, d doneObject) error {
	s.Note(key, d)
	return s.Save()
}

// Note records that key was written whole without saving: the record goes
// to disk with the next save, if any. For objects sent in one PUT, whose
// re-sending after a crash costs less than a fsync and a rename per file.
func (s *resumeState) Note(key string, done doneObject) {
	s.f.Change(func(d *stateData) {
		delete(d.Uploads, key)
		d.Done[key] = done
	})
}

// GetDone returns the record of an object written whole.
func (s *resumeState) GetDone(key string) (done doneObject, ok bool) {
	s.f.View(func(d *stateData) { done, ok = d.Done[key] })
	return done, ok
}

// Save writes the state even if nothing changed (so the attempt name is
// kept before any object is written).
func (s *resumeState) Save() error {
	return s.f.Save()
}

// Uploads returns a copy of the recorded uploads.
func (s *resumeState) Uploads() (out map[string]pendingUpload) {
	s.f.View(func(d *stateData) { out = maps.Clone(d.Uploads) })
	return out
}

// DoneObjects returns a copy of the records of objects written whole.
func (s *resumeState) DoneObjects() (out map[string]doneObject) {
	s.f.View(func(d *stateData) { out = maps.Clone(d.Done) })
	return out
}

// Delete removes the state file: the push it belonged to is finished. A
// save in flight finishes first and no later save writes the file again.
func (s *resumeState) Delete() error {
	return s.f.Delete()
}
