package control

import (
	"context"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
)

// StepState is where a step is in the agent's pipeline.
type StepState string

// Step states, in pipeline order; Abandoned and Failed are off the path.
const (
	// StatePending: complete on disk, waiting for its turn to upload.
	StatePending StepState = "pending"
	// StateUploading: files are being uploaded.
	StateUploading StepState = "uploading"
	// StateCommitted: the manifest is written; the step is durable.
	StateCommitted StepState = "committed"
	// StateNodeDone: multi-node only: this node's files and part manifest
	// are durable; the step commits when every node's part is there.
	StateNodeDone StepState = "node-done"
	// StateFailed: the last attempt failed; it is retried with backoff.
	StateFailed StepState = "failed"
	// StateAbandoned: the trainer deleted the step before it was durable.
	StateAbandoned StepState = "abandoned"
	// StateSkipped: with WhenBehind SkipSuperseded, a newer complete step
	// superseded it before its upload started; it is not uploaded.
	StateSkipped StepState = "skipped"
	// StateLost: complete on disk (by its layout's rules) but deleted
	// before it could be uploaded, typically by a trainer's cleanup of old
	// steps within seconds of the save; nothing of it is durable.
	StateLost StepState = "lost"
)

// StepStatus describes one step the agent has seen.
type StepStatus struct {
	Step  int64     `json:"step"`
	State StepState `json:"state"`
	Files int       `json:"files"`
	Bytes int64     `json:"bytes"`
	// BytesSent counts the step's bytes the server acknowledged, those
	// sent early while it was written (--pipeline) included.
	BytesSent int64 `json:"bytes_sent"`
	// Detected is when the step was found complete on disk.
	Detected time.Time `json:"detected"`
	// LastWrite is when the trainer last wrote the step (its newest
	// file's modification time): what time to durable counts from.
	LastWrite time.Time `json:"last_write,omitempty"`
	// Committed is when its manifest was written (zero until then).
	Committed time.Time `json:"committed,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	Error     string    `json:"error,omitempty"`
	// PartsResent counts parts sent while the step was written (agent
	// --pipeline) whose bytes changed before it was complete, sent again.
	PartsResent int64 `json:"parts_resent,omitempty"`
	// Requests counts the S3 requests made for this step by operation,
	// retries and failed attempts included (the agent uploads one step at
	// a time, so every request in that window is this step's).
	Requests map[string]int64 `json:"requests,omitempty"`
}

// Status is a snapshot of the agent, served by `ferry status`.
type Status struct {
	Watch       string `json:"watch"`
	Destination string `json:"destination"`
	Layout      string `json:"layout"`
	// StateDir is this agent's own state folder (journal, upload state,
	// control socket).
	StateDir string `json:"state_dir"`
	// MetricsAddr is where /metrics listens, "" when disabled.
	MetricsAddr string       `json:"metrics_addr,omitempty"`
	Started     time.Time    `json:"started"`
	Draining    bool         `json:"draining"`
	Steps       []StepStatus `json:"steps"`
	// Settling lists the steps found on disk that are not complete yet:
	// settling, or waiting for a marker, a rank or a temporary file.
	Settling []detect.Pending `json:"settling,omitempty"`
	// Unrecognized, when set, says that --layout auto recognises no
	// checkpoint in a watch dir that is not empty, with what it saw and
	// the flags that would fit.
	Unrecognized string `json:"unrecognized,omitempty"`
	// LastCommitted is the highest committed step, -1 if none.
	LastCommitted int64 `json:"last_committed"`
	// BytesSent and Rate (bytes/s over the last RateWindowSeconds) cover
	// all uploads.
	BytesSent int64   `json:"bytes_sent"`
	Rate      float64 `json:"rate"`
	// BytesSentEarly is the part of BytesSent sent while its step was
	// still being written (--pipeline).
	BytesSentEarly int64 `json:"bytes_sent_early"`
	// RateWindowSeconds is the window Rate averages over.
	RateWindowSeconds int    `json:"rate_window_s"`
	LastError         string `json:"last_error,omitempty"`
	// Requests counts S3 requests by operation, retries included.
	Requests map[string]int64 `json:"requests,omitempty"`
}

// Controller is what the control socket serves: the running agent
// implements it.
type Controller interface {
	// Status returns a snapshot.
	Status() Status
	// Flush blocks until every step seen so far is committed (or abandoned),
	// or ctx ends; it returns the steps still not committed.
	Flush(ctx context.Context) (notCommitted []int64, err error)
}

// Committer is a Controller that takes the trainer's word that a step is
// complete (ferry commit): Commit declares step n complete, made of paths
// (none: the layout's step n), and with wait returns once it is durable.
type Committer interface {
	Commit(ctx context.Context, n int64, paths []string, wait bool) error
}
