package bench

import (
	"fmt"
	"sort"
	"strings"
)

// markdown renders the report: one table per data set and phase, then the
// single-file RSS check, the BLAKE3 comparison, the agent, the targets and
// notes.
func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	r.intro(p)
	r.compareTables(p)
	r.diskText(p)
	r.requestsMarkdown(&b)
	r.rssTable(p)
	r.interferenceTable(p)
	r.blake3Table(p)
	if r.Agent != "" {
		p("## Agent\n\n%s\n\n", r.Agent)
	}
	r.durableTables(p)
	r.peersMarkdown(p)
	r.targetsTable(p)
	r.toolsTable(p)
	r.profilesList(p)
	if len(r.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	return b.String()
}

// intro is the title, the machine, the data sets and how to reproduce the
// run.
func (r *report) intro(p func(string, ...any)) {
	p("# ferry benchmark\n\n")
	p("%s, %d cores, %.1f GiB RAM, Linux %s, %s. Data sets: %s. %d measured rounds after %d warm-up, tools alternating; median of the rounds, peak RSS is the largest. ",
		r.Host.CPU, r.Host.Cores, r.Host.MemGiB, r.Host.Kernel, r.Host.Go, r.setsText(), r.Rounds, r.Warmup)
	p("Server: versitygw (posix) on loopback %s, same disk. %s ", strings.ToUpper(r.Scheme), r.cacheText())
	p("Run %s to %s; load average %s at the start, %s at the end (the machine is shared).\n\n",
		r.Started.Format("2006-01-02 15:04Z"), r.Finished.Format("15:04Z"), r.Host.LoadStart, r.Host.LoadEnd)
	repro := "make bench"
	if r.Scheme == "https" {
		repro = `make bench BENCH_FLAGS="-tls"`
	}
	p("Reproduce: `%s` (this run: `%s`)\n\n", repro, r.Command)
}

// diskText is the local disk's floor under a durable restore.
func (r *report) diskText(p func(string, ...any)) {
	d := r.Disk
	if d == nil {
		return
	}
	p("## Local disk (the floor of a durable restore)\n\n")
	p("%s written with direct I/O in 1 MiB writes by %d writers and fsynced, in the scratch area the restores write to: %.2f s (%.0f MiB/s), median of 3.", fmtSize(d.Bytes), d.Writers, d.WallS, d.MiBps)
	if d.FloorVsBestPeer != nil {
		p(" A restore whose files are on disk when it returns cannot take less, which is %.2fx the fastest peer's restore wall time (the peers return with their writes still in the page cache; see \"wall + sync\").", *d.FloorVsBestPeer)
	}
	p("\n\n")
}

// rssTable is ferry's peak RSS on one file of each -rss-sizes.
func (r *report) rssTable(p func(string, ...any)) {
	if len(r.RSS) == 0 {
		return
	}
	p("## ferry push and restore peak RSS by file size (one file, default settings)\n\n")
	p("| op | file | wall s | MiB/s | client CPU s/GiB | peak RSS MiB | server CPU s |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, x := range r.RSS {
		p("| %s | %s | %.1f | %.0f | %.2f | %.0f | %.1f |\n", x.Op, fmtSize(x.SizeBytes), x.WallS, mibps(x.SizeBytes, x.WallS), x.CPUPerGiB, x.MaxRSSMiB, x.ServerCPUS)
	}
	p("\n")
}

// blake3Table compares ferry's BLAKE3 with b3sum.
func (r *report) blake3Table(p func(string, ...any)) {
	if len(r.BLAKE3) == 0 {
		return
	}
	p("## BLAKE3 over one 1 GiB file in page cache (median of 3)\n\n")
	p("| hasher | threads | MiB/s | CPU s |\n|---|---|---:|---:|\n")
	for _, h := range r.BLAKE3 {
		cpu := "-"
		if h.CPUS > 0 {
			cpu = fmt.Sprintf("%.2f", h.CPUS)
		}
		p("| %s | %s | %.0f | %s |\n", h.Hasher, h.Threads, h.MiBps, cpu)
	}
	if r.B3sumVersion != "" {
		p("\n%s.\n", r.B3sumVersion)
	}
	p("\n")
}

// durableTables are the time to durable of each case and the newest-step
// lag of each --when-behind.
func (r *report) durableTables(p func(string, ...any)) {
	d := r.Durable
	if d == nil {
		return
	}
	p("## Time to durable\n\nFrom the trainer's last write of a step to its manifest on the server (medians of %d alternated runs):\n\n", durableRounds)
	p("| step | close-write | pipeline | runs (s) | median | MiB sent while written | parts re-sent |\n|---|---|---|---|---:|---|---|\n")
	for _, c := range d.Cases {
		p("| %s | %v | %v | %v | %.2f s | %v | %v |\n", c.Name, c.CloseWrite, c.Pipeline, c.Runs, c.MedianS, c.EarlyMiB, c.PartsResent)
	}
	p("\nNewest-step lag: %d steps of 2 x %s written every %v, upload capped at %s:\n\n", lagSteps, fmtSize(lagSize), lagInterval, lagBandwidth)
	p("| --when-behind | worst wait for a step as new to be durable | last step | committed by then |\n|---|---:|---:|---:|\n")
	for _, l := range d.Lag {
		p("| %s | %.1f s | %.1f s | %d of %d |\n", l.Policy, l.MaxLagS, l.LastStepS, l.Committed, l.Steps)
	}
	p("\n")
}

// targetsTable says which of the run's targets were met.
func (r *report) targetsTable(p func(string, ...any)) {
	if len(r.Targets) == 0 {
		return
	}
	p("## Targets\n\n| target | this run | limit | met |\n|---|---:|---:|---|\n")
	for _, t := range r.Targets {
		met := "no"
		if t.Pass {
			met = "yes"
		}
		p("| %s | %.2f %s | %.2f %s | %s |\n", t.Name, t.Value, t.Unit, t.Limit, t.Unit, met)
	}
	p("\n")
}

// toolsTable is each tool's version and settings, and whether it verifies
// what it moves.
func (r *report) toolsTable(p func(string, ...any)) {
	p("## Tools\n\n| tool | version | settings | verifies content |\n|---|---|---|---|\n")
	for _, t := range r.Tools {
		verif := "no (no content hash; S3 checks only what the SDK sends)"
		if t.Verifies {
			verif = "yes: BLAKE3 per file, CRC32C per part"
		}
		p("| %s | %s | %s | %s |\n", t.Name, t.Version, t.Settings, verif)
	}
	p("\n")
}

// profilesList names the perf profiles written, by name.
func (r *report) profilesList(p func(string, ...any)) {
	if len(r.Profiles) == 0 {
		return
	}
	p("## Profiles\n\n")
	names := make([]string, 0, len(r.Profiles))
	for name := range r.Profiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p("- %s: `%s`\n", name, r.Profiles[name])
	}
	p("\n")
}

// setsText lists the data sets in a few words.
func (r *report) setsText() string {
	if len(r.Sets) == 0 {
		return "none (no upload or restore phase)"
	}
	var d []string
	for _, s := range r.Sets {
		d = append(d, s.describe())
	}
	return strings.Join(d, "; ")
}

// cacheText says what the page cache held when the runs started.
func (r *report) cacheText() string {
	ready := "\"ready\" adds to a restore's wall time the time to read every restored file once " +
		fmt.Sprintf("(%d readers, %d MiB reads) as soon as the tool exits.", readyReaders, readyBuf>>20)
	if !r.ColdRestores {
		return "Warm page cache for every tool alike: uploads read a data set just written, and the page cache could not be dropped before the restores (see notes). " + ready
	}
	return "Uploads read a data set in the page cache (just written); every restore starts with the page cache dropped " +
		"(`sync; echo 3 > /proc/sys/vm/drop_caches`), and " + ready
}

// compareTables renders one table per data set and phase; restore tables
// have the ready columns.
func (r *report) compareTables(p func(string, ...any)) {
	for _, set := range r.Sets {
		for _, phase := range r.phases {
			rows := r.Summary[summaryKey(set.Name, phase)]
			if len(rows) == 0 {
				continue
			}
			ready := phase == "restore"
			p("## %s: %s\n\n", titleCase(phase), set.describe())
			head := summaryCells(ready, "tool", "median wall s", "ready s", "MiB/s", "wall + sync s", "client CPU s/GiB",
				"peak RSS MiB", "server CPU s", "wall vs best peer", "ready vs best peer", "CPU vs best peer", "verifies content")
			align := summaryCells(ready, "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---")
			p("| %s |\n|%s|\n", strings.Join(head, " | "), strings.Join(align, "|"))
			for _, s := range rows {
				verif := "no"
				if s.Verifies {
					verif = "BLAKE3 of every byte"
				}
				cells := summaryCells(ready, s.Tool, f2(s.WallS), f2(s.ReadyS), fmt.Sprintf("%.0f", s.MiBps), f2(s.WallSyncS), f2(s.CPUPerGiB),
					fmt.Sprintf("%.0f", s.MaxRSSMiB), serverCPU(s), ratio(s.WallVsBestPeer), ratio(s.ReadyVsBestPeer), ratio(s.CPUVsBestPeer), verif)
				p("| %s |\n", strings.Join(cells, " | "))
			}
			p("\n")
		}
	}
}

// serverCPU is the server's CPU seconds and, behind -wan, the link's
// (toxiproxy's), which shares these cores with client and server.
func serverCPU(s summary) string {
	if s.LinkCPUS > 0 {
		return fmt.Sprintf("%s (link %s)", f2(s.ServerCPUS), f2(s.LinkCPUS))
	}
	return f2(s.ServerCPUS)
}

// summaryCells returns the cells of one summary row, given in the order of
// a restore table; without ready it leaves out the two ready columns (the
// 3rd and the 10th).
func summaryCells(ready bool, cells ...string) []string {
	if ready {
		return cells
	}
	out := append([]string{}, cells[:2]...)
	out = append(out, cells[3:9]...)
	return append(out, cells[10:]...)
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

func ratio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *v)
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// relOrDash shows a rate relative to the baseline ("1.000x"), "baseline"
// for the baseline itself, "-" where there is none.
func relOrDash(rel, abs float64) string {
	switch {
	case rel > 0:
		return fmt.Sprintf("%.3fx", rel)
	case abs > 0:
		return "baseline"
	}
	return "-"
}

func numOrDash(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// interferenceTable writes the interference phase's table, if it ran.
func (r *report) interferenceTable(p func(string, ...any)) {
	if len(r.Interference) == 0 {
		return
	}
	p("## Interference: the trainer with the agent beside it\n\n")
	p("The trainer simulator burns CPU on every core but the last for %s and writes its next checkpoint (%s, fsynced) meanwhile; "+
		"the agent, on the same cores, uploads the previous step (%d x %s); the server stores in memory (a remote store's disk is not the node's) and runs in %s. "+
		"Compute and write rates are the trainer's, relative to the trainer alone; time-to-durable runs from the agent's start to the step's manifest.\n\n",
		interfWindow, fmtSize(interfNextBytes), interfRanks, fmtSize(interfRankSize), r.InterferenceNet)
	p("Each ratio is of medians over the rounds, with in brackets the lowest and highest of a round's case over the same round's baseline; " +
		"the noise control is the trainer alone measured again, so its spread is what this machine's noise alone does. " +
		"The agent's CPU and disk use are its own while the trainer ran, steal the share of the trainer's cores the hypervisor gave to other guests meanwhile (medians).\n\n")
	p("| case | trainer compute | trainer checkpoint write | steal | agent CPU s / disk read, write MiB while the trainer ran | agent upload MiB/s | time-to-durable s |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.Interference {
		use := "-"
		if c.AgentCPUS > 0 || c.AgentDiskRead > 0 || c.AgentDiskWrite > 0 {
			use = fmt.Sprintf("%.2f / %.0f, %.0f", c.AgentCPUS, c.AgentDiskRead, c.AgentDiskWrite)
		}
		steal := "-"
		if c.ComputeRate > 0 {
			steal = fmt.Sprintf("%.1f%%", c.StealPct)
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", c.Name, relOrDash(c.ComputeVsBaseline, c.ComputeRate)+rangeOrEmpty(c.ComputeVsBaselineRange),
			relOrDash(c.WriteVsBaseline, c.WriteMiBps)+rangeOrEmpty(c.WriteVsBaselineRange), steal, use,
			numOrDash(c.UploadMiBps), numOrDash(c.TimeToDurableS))
	}
	p("\n")
}

// rangeOrEmpty formats a paired range as " [lo-hi]", or nothing.
func rangeOrEmpty(r [2]float64) string {
	if r[1] == 0 {
		return ""
	}
	return fmt.Sprintf(" [%.2f-%.2f]", r[0], r[1])
}
