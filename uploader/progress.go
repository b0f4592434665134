package uploader

// Progress receives what a push (Destination.Push) or an early send
// (Destination.SendEarly) achieves as it happens, through
// PushOptions.Progress. Its methods are called from many goroutines at
// once and must not block. Embed NoProgress to implement only some of them.
type Progress interface {
	// Sent reports n more bytes acknowledged by the server.
	Sent(n int64)
	// Durable reports n more bytes of the step on the server: sent and
	// acknowledged, held from an earlier run, or deduplicated. What a
	// progress display counts.
	Durable(n int64)
	// Deduplicated reports a file of n bytes not sent because an earlier
	// step's object holds the same content.
	Deduplicated(n int64)
}

// NoProgress is a Progress that ignores everything: the default, and what
// to embed in a Progress that wants only some of the reports.
type NoProgress struct{}

// Sent implements Progress.
func (NoProgress) Sent(int64) {}

// Durable implements Progress.
func (NoProgress) Durable(int64) {}

// Deduplicated implements Progress.
func (NoProgress) Deduplicated(int64) {}

// progressOr returns p, or NoProgress when p is nil.
func progressOr(p Progress) Progress {
	if p == nil {
		return NoProgress{}
	}
	return p
}
