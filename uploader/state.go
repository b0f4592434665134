package uploader

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"

	"github.com/ferrylabs/ferry/internal/atomicfile"
)

// Upload records one multipart upload in flight.
type Upload struct {
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
	Sent map[int32]SentPart `json:"sent,omitempty"`
}

// SentPart is the server's answer to a part sent early.
type SentPart struct {
	ETag   string `json:"etag"`
	CRC32C string `json:"crc32c"`
}

// State is a small JSON file recording the multipart uploads of one push in
// flight, and the attempt name of its objects, so that a push killed at any
// point (SIGKILL included) resumes where it stopped. Every change is written
// to a temp file and renamed, so the file is always whole. It is not
// fsynced: the state only saves work (what it records is on the server),
// so a power cut costs re-sending, never a wrong commit, while an fsync on
// the checkpoint's file system can wait behind the trainer's writeback, on
// the path between the trainer's last write and the manifest.
//
// mu guards data and is never held across I/O: a save encodes a snapshot
// under it and writes that snapshot under writeMu, skipping it when a newer
// one is already on disk.
type State struct {
	path string
	mu   sync.Mutex
	data stateData
	seq  uint64 // snapshots taken, under mu

	writeMu sync.Mutex
	written uint64 // the newest snapshot on disk, under writeMu
}

type stateData struct {
	Version int `json:"version"`
	// Owner names what this state belongs to (destination, step, node); a
	// state whose owner differs is ignored, so stale files never mix.
	Owner   string            `json:"owner"`
	Attempt string            `json:"attempt"`
	Uploads map[string]Upload `json:"uploads"`
	// Done records objects already written whole, so a resumed push neither
	// re-reads nor re-sends them.
	Done map[string]DoneObject `json:"done"`
}

// DoneObject records a file already uploaded whole to its key.
type DoneObject struct {
	Stamp    fileStamp `json:"file"`
	BLAKE3   string    `json:"blake3"`
	PartSize int64     `json:"part_size"`
}

// OpenState loads the state file at path if it exists and belongs to owner;
// otherwise it starts an empty state with a new attempt name (newAttempt is
// called to make one). The file is created on the first change.
func OpenState(path, owner string, newAttempt func() string) (*State, error) {
	s := &State{path: path}
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if jerr := json.Unmarshal(raw, &s.data); jerr != nil || s.data.Version != 1 || s.data.Owner != owner || s.data.Attempt == "" {
			s.data = stateData{}
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("read upload state %s: %w", path, err)
	}
	if s.data.Attempt == "" {
		s.data = stateData{Version: 1, Owner: owner, Attempt: newAttempt()}
	}
	if s.data.Uploads == nil {
		s.data.Uploads = map[string]Upload{}
	}
	if s.data.Done == nil {
		s.data.Done = map[string]DoneObject{}
	}
	return s, nil
}

// Attempt returns the attempt name recorded in the state.
func (s *State) Attempt() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Attempt
}

// Get returns the upload recorded for key.
func (s *State) Get(key string) (Upload, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	up, ok := s.data.Uploads[key]
	return up, ok
}

// Put records an upload for key and saves the state.
func (s *State) Put(key string, up Upload) error {
	s.mu.Lock()
	s.data.Uploads[key] = up
	snap, err := s.snapshotLocked()
	s.mu.Unlock()
	return s.write(snap, err)
}

// PutEarlyPart records that part n of the early upload for key was sent
// with bytes of the given digest and answered with sent, and saves the
// state.
func (s *State) PutEarlyPart(key string, n int32, digest string, sent SentPart) error {
	return s.change(key, func(up *Upload) {
		// New maps: copies handed out by Get and Uploads stay as they were.
		up.Digests, up.Sent = maps.Clone(up.Digests), maps.Clone(up.Sent)
		if up.Digests == nil {
			up.Digests = map[int32]string{}
		}
		if up.Sent == nil {
			up.Sent = map[int32]SentPart{}
		}
		up.Digests[n], up.Sent[n] = digest, sent
	})
}

// ForgetSent drops the server's answers recorded for the early upload of
// key (the server refused to complete the upload with them): the next
// push lists the parts instead.
func (s *State) ForgetSent(key string) error {
	return s.change(key, func(up *Upload) { up.Sent = nil })
}

// change applies fn to the upload recorded for key and saves the state.
func (s *State) change(key string, fn func(*Upload)) error {
	s.mu.Lock()
	up, ok := s.data.Uploads[key]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("update the upload of %s: no upload recorded", key)
	}
	fn(&up)
	s.data.Uploads[key] = up
	snap, err := s.snapshotLocked()
	s.mu.Unlock()
	return s.write(snap, err)
}

// Remove forgets the upload for key and saves the state.
func (s *State) Remove(key string) error {
	s.mu.Lock()
	if _, ok := s.data.Uploads[key]; !ok {
		s.mu.Unlock()
		return nil
	}
	delete(s.data.Uploads, key)
	snap, err := s.snapshotLocked()
	s.mu.Unlock()
	return s.write(snap, err)
}

// Finish records that key was written whole, replacing its upload entry,
// and saves the state.
func (s *State) Finish(key string, d DoneObject) error {
	s.Note(key, d)
	return s.Save()
}

// Note records that key was written whole without saving: the record goes
// to disk with the next save, if any. For objects sent in one PUT, whose
// re-sending after a crash costs less than a fsync and a rename per file.
func (s *State) Note(key string, d DoneObject) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.data.Uploads, key)
	s.data.Done[key] = d
}

// GetDone returns the record of an object written whole.
func (s *State) GetDone(key string) (DoneObject, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.data.Done[key]
	return d, ok
}

// Save writes the state even if nothing changed (so the attempt name is
// kept before any object is written).
func (s *State) Save() error {
	s.mu.Lock()
	snap, err := s.snapshotLocked()
	s.mu.Unlock()
	return s.write(snap, err)
}

// Uploads returns a copy of the recorded uploads.
func (s *State) Uploads() map[string]Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Upload, len(s.data.Uploads))
	for k, v := range s.data.Uploads {
		out[k] = v
	}
	return out
}

// DoneObjects returns a copy of the records of objects written whole.
func (s *State) DoneObjects() map[string]DoneObject {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]DoneObject, len(s.data.Done))
	for k, v := range s.data.Done {
		out[k] = v
	}
	return out
}

// Delete removes the state file: the push it belonged to is finished.
func (s *State) Delete() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove upload state %s: %w", s.path, err)
	}
	return nil
}

// snapshot is one encoding of the state, numbered in the order taken.
type snapshot struct {
	seq uint64
	raw []byte
}

// snapshotLocked encodes the state; s.mu is held.
func (s *State) snapshotLocked() (snapshot, error) {
	raw, err := json.Marshal(&s.data)
	if err != nil {
		return snapshot{}, fmt.Errorf("encode upload state: %w", err)
	}
	s.seq++
	return snapshot{seq: s.seq, raw: raw}, nil
}

// write writes snap unless a newer snapshot is already on disk (it holds
// every change snap holds).
func (s *State) write(snap snapshot, err error) error {
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if snap.seq <= s.written {
		return nil
	}
	if err := atomicfile.WriteCached(s.path, snap.raw, 0o600); err != nil {
		return fmt.Errorf("save upload state: %w", err)
	}
	s.written = snap.seq
	return nil
}
