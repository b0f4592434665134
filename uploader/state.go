package uploader

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
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
}

// State is a small JSON file recording the multipart uploads of one push in
// flight, and the attempt name of its objects, so that a push killed at any
// point (SIGKILL included) resumes where it stopped. Every change is written
// to a temp file, fsynced and renamed, so the file is always whole.
type State struct {
	path string
	mu   sync.Mutex
	data stateData
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
	defer s.mu.Unlock()
	s.data.Uploads[key] = up
	return s.saveLocked()
}

// PutDigest records that part n of the early upload for key was sent with
// bytes of the given digest, and saves the state.
func (s *State) PutDigest(key string, n int32, digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	up, ok := s.data.Uploads[key]
	if !ok {
		return fmt.Errorf("record part %d of %s: no upload recorded", n, key)
	}
	// A new map: copies handed out by Get and Uploads stay as they were.
	up.Digests = maps.Clone(up.Digests)
	if up.Digests == nil {
		up.Digests = map[int32]string{}
	}
	up.Digests[n] = digest
	s.data.Uploads[key] = up
	return s.saveLocked()
}

// Remove forgets the upload for key and saves the state.
func (s *State) Remove(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data.Uploads[key]; !ok {
		return nil
	}
	delete(s.data.Uploads, key)
	return s.saveLocked()
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
	defer s.mu.Unlock()
	return s.saveLocked()
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

func (s *State) saveLocked() error {
	raw, err := json.Marshal(&s.data)
	if err != nil {
		return fmt.Errorf("encode upload state: %w", err)
	}
	return WriteFileAtomic(s.path, raw, 0o600)
}

// WriteFileAtomic writes data to path through a temp file in the same
// directory, fsyncs it and renames it into place, creating the directory
// (mode 0700) if needed.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
