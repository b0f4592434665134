package doctor

import (
	"strings"
	"testing"
	"time"
)

// The clock check against the server's Date header: within a minute is
// ok, beyond it a warning, beyond ten minutes a failure naming what S3
// refuses at fifteen; a round trip's half is allowed for; no Date, or an
// endpoint that does not answer, is said as such.
func TestClockCheck(t *testing.T) {
	up := ok("endpoint", "answers")
	for _, c := range []struct {
		name   string
		ep     Result
		server time.Time
		rtt    time.Duration
		want   Status
		detail string
	}{
		{"in step", up, time.Now(), 0, OK, "within 1s of the server's clock"},
		{"a slow round trip is no skew", up, time.Now().Add(-2 * time.Second), 4 * time.Second, OK, "within"},
		{"two minutes behind", up, time.Now().Add(2 * time.Minute), 0, Warn, "-2m0s off the server's clock"},
		{"twenty minutes ahead", up, time.Now().Add(-20 * time.Minute), 0, Fail, "20m0s off the server's clock: signed requests are refused beyond 15 minutes (RequestTimeTooSkewed)"},
		{"no Date header", up, time.Time{}, 0, Warn, "no Date header"},
		{"no endpoint", fail("endpoint", "", "refused"), time.Now(), 0, Skip, "the endpoint does not answer"},
	} {
		r := clockCheck(c.ep, c.server, c.rtt)
		if r.Status != c.want || !strings.Contains(r.Detail, c.detail) {
			t.Errorf("%s: %s %q, want %s with %q", c.name, r.Status, r.Detail, c.want, c.detail)
		}
		if (r.Status == Warn || r.Status == Fail) && c.detail != "no Date header" && !strings.Contains(r.Fix, "chrony") {
			t.Errorf("%s: fix %q, want how to set the clock", c.name, r.Fix)
		}
	}
}
