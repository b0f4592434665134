package bench

import (
	"fmt"
	"log"
	"sort"
)

// logPeersRun prints one run of the peers phase as it ends.
func logPeersRun(run peersRun, step int64, r int) {
	tag := "round " + fmt.Sprint(r+1)
	if r < 0 {
		tag = "warm-up"
	}
	log.Printf("peers %-8s %d nodes %-5s %-8s %6.2f s  bucket %5.2fx step (server sent %5.2fx)  peers %5.2fx  GETs %d (server %d)  client CPU %.1f s  server CPU %.1f s",
		run.Case, run.Nodes, run.Mode, tag, run.WallS, float64(run.BucketBytes)/float64(step), float64(run.ServerSentBytes)/float64(step),
		float64(run.PeerBytes)/float64(step), run.GETs, run.ServerGETs, run.ClientCPUS, run.ServerCPUS)
}

// summarizePeers reduces the measured runs of one case, node count and
// mode to medians.
func summarizePeers(runs []peersRun, name string, n int, mode string) peersSummary {
	var wall, bucketB, peerB, gets, sgets, sent, ccpu, scpu []float64
	for _, r := range runs {
		if r.Case != name || r.Nodes != n || r.Mode != mode || r.Warmup {
			continue
		}
		wall, bucketB, peerB = append(wall, r.WallS), append(bucketB, float64(r.BucketBytes)), append(peerB, float64(r.PeerBytes))
		gets, sgets, sent = append(gets, float64(r.GETs)), append(sgets, float64(r.ServerGETs)), append(sent, float64(r.ServerSentBytes))
		ccpu, scpu = append(ccpu, r.ClientCPUS), append(scpu, r.ServerCPUS)
	}
	return peersSummary{Runs: len(wall), WallS: median(wall), BucketBytes: median(bucketB), PeerBytes: median(peerB),
		GETs: median(gets), ServerGETs: median(sgets), ServerSentBytes: median(sent), ClientCPUS: median(ccpu), ServerCPUS: median(scpu)}
}

// peersMarkdown renders the peers phase's table.
func (r *report) peersMarkdown(p func(string, ...any)) {
	res := r.Peers
	if res == nil || len(res.Rows) == 0 {
		return
	}
	link := "on loopback"
	if res.Link != "" {
		link = "through the link (" + res.Link + "); the peers talk over loopback directly"
	}
	p("## Restore with peers: N nodes at once, alone and with --peers\n\n")
	p("N `ferry restore` processes start at once, each into its own empty directory with the page cache dropped, reaching the bucket %s: "+
		"alone (solo), or with `--peers` (every node's 127.0.0.1:PORT, `--peer-rank i`). "+
		"Whole: every node restores the step of %d x %s. Disjoint: node i restores only rank i's %d x %s (`--ranks i`). "+
		"Wall: from the start to the last node's exit (a --peers node lingers while others need its ranges). "+
		"Bytes are summed over the nodes, as multiples of what the nodes need between them (the step, each byte once); "+
		"\"server\" is versitygw's side (bytes written to its sockets; GetObject lines in its access log). "+
		"Medians of %d rounds, solo and peers alternating; every node's files checked against the pushed BLAKE3.\n\n",
		link, res.Files, fmtSize(res.FileSize), res.Files, fmtSize(res.FileSize), r.Rounds)
	p("| case | nodes | step | solo wall s | peers wall s | peers / solo | from the bucket, solo | from the bucket, peers | between peers | GETs solo / peers |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range res.Rows {
		x := func(v float64) string { return fmt.Sprintf("%.2fx", v/float64(row.StepBytes)) }
		bucketCell := func(s peersSummary) string {
			if !res.ServerCounts && s.ServerSentBytes == 0 {
				return x(s.BucketBytes)
			}
			return fmt.Sprintf("%s (server %s)", x(s.BucketBytes), x(s.ServerSentBytes))
		}
		gets := fmt.Sprintf("%.0f / %.0f", row.Solo.GETs, row.Peers.GETs)
		if res.ServerCounts {
			gets += fmt.Sprintf(" (server %.0f / %.0f)", row.Solo.ServerGETs, row.Peers.ServerGETs)
		}
		p("| %s | %d | %s | %.2f | %.2f | %.2fx | %s | %s | %s | %s |\n", row.Case, row.Nodes, fmtBytesShort(row.StepBytes),
			row.Solo.WallS, row.Peers.WallS, row.Ratio, bucketCell(row.Solo), bucketCell(row.Peers), x(row.Peers.PeerBytes), gets)
	}
	p("\n")
}

// fmtBytesShort prints a byte count in MiB or GiB with one decimal where
// it is not whole.
func fmtBytesShort(n int64) string {
	if n%(1<<20) == 0 && n < 1<<30 || n%(1<<30) == 0 {
		return fmtSize(n)
	}
	return fmt.Sprintf("%.1fGiB", gib(n))
}

// sortedInts returns the distinct values of v in increasing order.
func sortedInts(v []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range v {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}
