package verify

import (
	"context"
	"fmt"

	"github.com/ferrylabs/ferry/internal/remote"
)

// Skipped is a committed step passed over on the way to the newest
// restorable one, and why.
type Skipped struct {
	Step int64 `json:"step"`
	// Reason is one line: "recorded damaged: ...", or the first problem
	// found and how many there were.
	Reason string `json:"reason"`
	// Recorded is true when a damage record in the bucket ruled the step
	// out (it was not checked again); Problems are what the check found
	// otherwise.
	Recorded bool      `json:"recorded,omitempty"`
	Problems []Problem `json:"problems,omitempty"`
}

// Newest is what NewestRestorable found.
type Newest struct {
	// Found is false when no committed step is restorable; Step and
	// Report are then zero.
	Found  bool        `json:"found"`
	Step   int64       `json:"step"`
	Report *StepReport `json:"report,omitempty"`
	// Skipped are the newer steps passed over, newest first.
	Skipped []Skipped `json:"skipped"`
	// Reports holds every report made, newest first: the skipped steps'
	// that were checked, and the answer's.
	Reports []StepReport `json:"-"`
}

// NewestRestorable checks opts.Steps (committed steps, newest first) one
// at a time until one holds, as restore --on-damaged previous would choose:
// a step with a damage record in the bucket is skipped without being read,
// as restores skip it; any other is checked as Verify checks it (sizes,
// and with opts.ReadShare the bytes). A step whose check could not read
// something (Unreadable) is skipped too: it is not proven restorable.
func NewestRestorable(ctx context.Context, opts Options) (Newest, error) {
	damaged, err := remote.DamagedSteps(ctx, opts.Store, opts.Prefix)
	if err != nil {
		return Newest{}, fmt.Errorf("newest restorable: %w", err)
	}
	out := Newest{Skipped: []Skipped{}}
	for _, step := range opts.Steps {
		if d, ok := damaged[step]; ok {
			out.Skipped = append(out.Skipped, Skipped{Step: step, Recorded: true, Reason: "recorded damaged: " + d.Reason})
			continue
		}
		one := opts
		one.Steps = []int64{step}
		reps, err := Verify(ctx, one)
		if err != nil {
			return out, err
		}
		rep := reps[0]
		out.Reports = append(out.Reports, rep)
		if rep.OK() {
			out.Found, out.Step, out.Report = true, step, &rep
			return out, nil
		}
		reason := rep.Problems[0].String()
		if n := len(rep.Problems); n > 1 {
			reason += fmt.Sprintf(" (and %d more problems)", n-1)
		}
		out.Skipped = append(out.Skipped, Skipped{Step: step, Reason: reason, Problems: rep.Problems})
	}
	return out, nil
}
