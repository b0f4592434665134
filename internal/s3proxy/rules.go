package s3proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Rule injects a fault into the requests it matches. A request is matched
// by the first rule of Config.Rules (or SetRules) that fires for it; the
// others do not see it.
type Rule struct {
	// Ops limits the rule to these operations (OpUploadPart...); empty
	// matches every operation.
	Ops []string
	// KeyPrefix limits the rule to requests whose object key starts with it.
	KeyPrefix string
	// After lets this many matching requests through before the rule fires:
	// After 2, Times 1 fires on the third matching request only.
	After int
	// Times bounds how often the rule fires; 0 means without bound.
	Times int
	// Probability, when above 0, fires on that fraction of the matching
	// requests, drawn from the proxy's seeded source (see Proxy.Seed).
	// 0 fires on every matching request.
	Probability float64
	// Action is what happens to a request the rule fires on.
	Action Action
}

func (r Rule) validate() error {
	if r.After < 0 || r.Times < 0 {
		return fmt.Errorf("rule %v: After and Times must not be negative", r)
	}
	if r.Probability < 0 || r.Probability > 1 {
		return fmt.Errorf("rule %v: Probability %v is outside [0, 1]", r, r.Probability)
	}
	return r.Action.validate()
}

// String describes the rule for logs.
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Action.String())
	if len(r.Ops) > 0 {
		fmt.Fprintf(&b, " on %s", strings.Join(r.Ops, ","))
	}
	if r.KeyPrefix != "" {
		fmt.Fprintf(&b, " under %q", r.KeyPrefix)
	}
	if r.After > 0 {
		fmt.Fprintf(&b, " after %d", r.After)
	}
	if r.Times > 0 {
		fmt.Fprintf(&b, " %d times", r.Times)
	}
	if r.Probability > 0 {
		fmt.Fprintf(&b, " with probability %g", r.Probability)
	}
	return b.String()
}

func (r Rule) matches(op, key string) bool {
	if len(r.Ops) > 0 && !slices.Contains(r.Ops, op) {
		return false
	}
	return strings.HasPrefix(key, r.KeyPrefix)
}

// ruleState is a rule and its counters since it was set.
type ruleState struct {
	Rule
	matched, fired int
}

type actionKind int

const (
	actForward actionKind = iota
	actStatus
	actResetMidRequest
	actResetBeforeResponse
	actResetMidResponse
	actDelay
	actStall
	actStallMidResponse
	actTruncate
	actFlipByte
	actTrickle
	actBarrier
	actIgnoreConditions
)

// Action is what the proxy does to a request a rule fires on. Build one with
// the functions below; the zero Action forwards the request unchanged.
type Action struct {
	kind    actionKind
	status  int
	code    string
	n       int64
	d       time.Duration
	message string
	gate    *gate
}

// gate opens once n requests have arrived at it.
type gate struct {
	mu      sync.Mutex
	n       int
	arrived int
	open    chan struct{}
}

func (g *gate) arrive() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrived++
	if g.arrived == g.n {
		close(g.open)
	}
	return g.open
}

// Status answers with an S3 error (HTTP status and error code, e.g. 503 and
// "SlowDown") without forwarding the request. The request body is read and
// discarded first, as a server would.
func Status(status int, s3Code string) Action {
	return Action{kind: actStatus, status: status, code: s3Code, message: "injected by s3proxy"}
}

// SlowDown is Status(503, "SlowDown"), what S3 and R2 answer when throttling.
func SlowDown() Action { return Status(http.StatusServiceUnavailable, "SlowDown") }

// InternalError is Status(500, "InternalError").
func InternalError() Action { return Status(http.StatusInternalServerError, "InternalError") }

// TooManyRequests is Status(429, "TooManyRequests").
func TooManyRequests() Action { return Status(http.StatusTooManyRequests, "TooManyRequests") }

// ResetMidRequest reads afterBytes of the request body, then resets the
// connection (TCP RST). The request is not forwarded. A negative afterBytes
// reads half of the declared Content-Length.
func ResetMidRequest(afterBytes int64) Action {
	return Action{kind: actResetMidRequest, n: afterBytes}
}

// ResetBeforeResponse forwards the request, so the server carries it out,
// then resets the connection instead of answering: the client cannot tell
// whether its request took effect.
func ResetBeforeResponse() Action { return Action{kind: actResetBeforeResponse} }

// ResetMidResponse forwards the request and sends the response headers and
// afterBytes of the body, then resets the connection. If the body is not
// longer than afterBytes it is sent whole before the reset.
func ResetMidResponse(afterBytes int64) Action {
	return Action{kind: actResetMidResponse, n: afterBytes}
}

// Delay waits d, then forwards the request normally.
func Delay(d time.Duration) Action { return Action{kind: actDelay, d: d} }

// Stall takes the connection and holds it without reading or answering for
// d (or until the proxy closes), then resets it. The request is not
// forwarded. Clients need a timeout of their own to get past it.
func Stall(d time.Duration) Action { return Action{kind: actStall, d: d} }

// StallMidResponse forwards the request, sends the headers and afterBytes of
// the body, then holds the connection for d (or until the proxy closes) and
// resets it: a server that hangs while sending.
func StallMidResponse(afterBytes int64, d time.Duration) Action {
	return Action{kind: actStallMidResponse, n: afterBytes, d: d}
}

// TruncateBody forwards the request and answers with only the first n bytes
// of the body, with Content-Length set to match: a well-formed response that
// is shorter than the client asked for. Only integrity and length checks can
// catch it.
func TruncateBody(n int64) Action { return Action{kind: actTruncate, n: n} }

// FlipByte forwards the request and inverts the bits of the response body's
// byte at offset (counted in this response's body, not in the object).
// Nothing changes when the body is shorter.
func FlipByte(offset int64) Action { return Action{kind: actFlipByte, n: offset} }

// Trickle forwards the request and sends the response body at about
// bytesPerSecond, in pieces ten times a second: a server or path that keeps
// delivering, too slowly to be of use. Only a client's own low-speed limit
// gets past it in reasonable time.
func Trickle(bytesPerSecond int64) Action { return Action{kind: actTrickle, n: bytesPerSecond} }

// Barrier holds each request it fires on until n of them have arrived (or
// timeout passed), then forwards them all: n clients released at the same
// moment, as nodes of a job finishing a step together. Give the rule
// Times n; one Barrier opens once.
func Barrier(n int, timeout time.Duration) Action {
	return Action{kind: actBarrier, n: int64(n), d: timeout, gate: &gate{n: n, open: make(chan struct{})}}
}

func (a Action) validate() error {
	switch a.kind {
	case actStatus:
		if a.status < 100 || a.status > 599 {
			return fmt.Errorf("action %v: HTTP status %d", a, a.status)
		}
	case actDelay, actStall, actStallMidResponse:
		if a.d < 0 {
			return fmt.Errorf("action %v: negative duration", a)
		}
	case actTruncate, actFlipByte, actResetMidResponse:
		if a.n < 0 {
			return fmt.Errorf("action %v: negative byte count", a)
		}
	case actTrickle:
		if a.n <= 0 {
			return fmt.Errorf("action %v: the rate must be positive", a)
		}
	case actBarrier:
		if a.n <= 0 || a.d <= 0 || a.gate == nil {
			return fmt.Errorf("action %v: build it with Barrier(n > 0, timeout > 0)", a)
		}
	}
	return nil
}

// String names the action, as Request.Fault records it.
func (a Action) String() string {
	switch a.kind {
	case actStatus:
		return fmt.Sprintf("status %d %s", a.status, a.code)
	case actResetMidRequest:
		if a.n < 0 {
			return "reset after half the request body"
		}
		return fmt.Sprintf("reset after %d request bytes", a.n)
	case actResetBeforeResponse:
		return "reset before response"
	case actResetMidResponse:
		return fmt.Sprintf("reset after %d response bytes", a.n)
	case actDelay:
		return fmt.Sprintf("delay %v", a.d)
	case actStall:
		return fmt.Sprintf("stall %v", a.d)
	case actStallMidResponse:
		return fmt.Sprintf("stall %v after %d response bytes", a.d, a.n)
	case actTruncate:
		return fmt.Sprintf("truncate body to %d bytes", a.n)
	case actFlipByte:
		return fmt.Sprintf("flip body byte %d", a.n)
	case actTrickle:
		return fmt.Sprintf("trickle body at %d B/s", a.n)
	case actBarrier:
		return fmt.Sprintf("barrier of %d requests (at most %v)", a.n, a.d)
	case actIgnoreConditions:
		return "ignore If-None-Match and If-Match"
	}
	return "forward"
}
