package scale

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Scale (in-memory store, %v per request, %s)\n\n", r.Latency, r.Date)
	if len(r.Commits) > 0 {
		b.WriteString("One step pushed by N nodes (8 ranks x 3 shards and a shared config each) through the real `uploader.Destination.Push`, nodes finishing within the spread:\n\n")
		b.WriteString("| nodes | spread | files | requests (per node) | max per node | part GETs | merges | commit after last part | cost per step | manifest | plan all | plan node 0 |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range r.Commits {
			total := sum(c.Requests)
			fmt.Fprintf(&b, "| %d | %v | %d | %d (%.1f) | %d | %d (%.2f N) | %d | %v | $%.5f | %s | %v | %v (%d files) |\n",
				c.Nodes, c.Spread, c.Files, total, float64(total)/float64(c.Nodes), c.MaxNodeRequests, c.PartGets,
				float64(c.PartGets)/float64(c.Nodes), c.Merges, ms(c.CommitLatency), c.Cost, mib(c.ManifestBytes),
				ms(c.PlanAll), ms(c.PlanNode), c.PlanNodeFiles)
		}
		b.WriteString("\nRequests by operation:\n\n")
		for _, c := range r.Commits {
			fmt.Fprintf(&b, "- %d nodes, spread %v: %s\n", c.Nodes, c.Spread, ops(c.Requests))
		}
		b.WriteString("\n")
	}
	if len(r.Manifests) > 0 {
		b.WriteString("One step of many files (8 per rank, 64 ranks per node):\n\n")
		b.WriteString("| files | manifest (shards) | commit | read (Get) | allocated by read | live heap | plan all | plan node 0 | plan requests |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, m := range r.Manifests {
			if m.Error != "" && m.Decode == 0 {
				fmt.Fprintf(&b, "| %d | %s | %v | | | | | | %s |\n", m.Files, mib(m.Bytes), ms(m.Encode), m.Error)
				continue
			}
			fmt.Fprintf(&b, "| %d | %s (%d) | %v | %v | %s | %s | %v | %v (%d files) | %d |\n", m.Files, mib(m.Bytes), m.Shards, ms(m.Encode), ms(m.Decode),
				mib(int64(m.DecodeAlloc)), mib(int64(m.DecodedHeap)), ms(m.PlanAll), ms(m.PlanNode), m.PlanNodeFiles, m.PlanRequests)
		}
		b.WriteString("\n")
	}
	if h := r.History; h != nil {
		fmt.Fprintf(&b, "A history of %d committed steps:\n\n| operation | wall | requests | result |\n|---|---|---|---|\n", h.Steps)
		for _, p := range h.Phases {
			fmt.Fprintf(&b, "| %s | %v | %s | %s |\n", p.Name, ms(p.Wall), ops(p.Requests), p.Note)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func sum(m map[string]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}

func ops(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) time.Duration {
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
