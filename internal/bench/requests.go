package bench

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"

	"github.com/ferrylabs/ferry/internal/s3proxy"
)

// requestCount is what one tool's run of one phase cost in S3 requests,
// counted at a proxy in front of the server (retries included: the proxy
// sees every attempt).
type requestCount struct {
	Tool  string         `json:"tool"`
	Phase string         `json:"phase"`
	Total int            `json:"total"`
	ByOp  map[string]int `json:"by_op"`
}

// countRequests runs each tool once more per phase through a counting proxy
// (not timed: the proxy costs CPU), so the report can set the request counts
// of ferry and its peers side by side. R2 bills per request. Only the
// big-file set is counted.
func (b *bench) countRequests(ctx context.Context, phases []string) error {
	if len(b.sets) == 0 {
		return nil
	}
	if len(b.sets) > 1 {
		b.rep.note("request counts: the big-file set only (the small-file set's are not counted)")
	}
	p, err := s3proxy.New(b.srv.endpoint, s3proxy.Config{})
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Close()
	direct := b.srv.endpoint
	b.srv.endpoint = p.URL()
	defer func() { b.srv.endpoint = direct }()
	for _, phase := range phases {
		for _, name := range b.cfg.tools {
			p.Reset()
			t := b.ts.get(name)
			if _, err := b.runOnce(ctx, b.sets[0], phase, t, b.cfg.rounds+1); err != nil {
				return fmt.Errorf("count requests of %s %s: %w", name, phase, err)
			}
			rc := requestCount{Tool: name, Phase: phase, ByOp: p.Counts()}
			// The harness checks and cleans up on the server's disk, not
			// through the proxy: every request counted is the tool's.
			for _, n := range rc.ByOp {
				rc.Total += n
			}
			b.rep.Requests = append(b.rep.Requests, rc)
			log.Printf("requests %-7s %-6s %d %v", phase, name, rc.Total, rc.ByOp)
		}
	}
	return nil
}

// requestsMarkdown renders the request counts.
func (r *report) requestsMarkdown(sb *strings.Builder) {
	if len(r.Requests) == 0 {
		return
	}
	sb.WriteString("## S3 requests per run of the big-file set (counted at a proxy in front of the server, retries included)\n\n")
	sb.WriteString("| phase | tool | requests | by operation |\n|---|---|---:|---|\n")
	for _, rc := range r.Requests {
		ops := make([]string, 0, len(rc.ByOp))
		for op, n := range rc.ByOp {
			ops = append(ops, fmt.Sprintf("%s %d", op, n))
		}
		sort.Strings(ops)
		fmt.Fprintf(sb, "| %s | %s | %d | %s |\n", rc.Phase, rc.Tool, rc.Total, strings.Join(ops, ", "))
	}
	sb.WriteString("\n")
}
