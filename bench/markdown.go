package main

import (
	"fmt"
	"sort"
	"strings"
)

// markdown renders the report: one table per phase, then the single-file
// RSS check, the BLAKE3 comparison, the agent, the targets and notes.
func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# ferry benchmark\n\n")
	p("%s, %d cores, %.1f GiB RAM, Linux %s, %s. %d files x %s, %d measured rounds after %d warm-up, tools alternating; median of the rounds, peak RSS is the largest. ",
		r.Host.CPU, r.Host.Cores, r.Host.MemGiB, r.Host.Kernel, r.Host.Go, r.Files, fmtSize(r.FileSize), r.Rounds, r.Warmup)
	p("Server: versitygw (posix) on loopback HTTP, same disk. Warm page cache for every tool alike (nothing is dropped). ")
	p("Run %s to %s; load average %s at the start, %s at the end (the machine is shared).\n\n",
		r.Started.Format("2006-01-02 15:04Z"), r.Finished.Format("15:04Z"), r.Host.LoadStart, r.Host.LoadEnd)
	p("Reproduce: `%s`\n\n", "make bench")
	for _, phase := range r.phases {
		rows := r.Summary[phase]
		if len(rows) == 0 {
			continue
		}
		p("## %s\n\n", titleCase(phase))
		p("| tool | median wall s | MiB/s | wall + sync s | client CPU s/GiB | peak RSS MiB | server CPU s | wall vs best peer | CPU vs best peer | verifies content |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range rows {
			verif := "no"
			if s.Verifies {
				verif = "BLAKE3 of every byte"
			}
			p("| %s | %.2f | %.0f | %.2f | %.2f | %.0f | %.2f | %s | %s | %s |\n", s.Tool, s.WallS, s.MiBps, s.WallSyncS, s.CPUPerGiB,
				s.MaxRSSMiB, s.ServerCPUS, ratio(s.WallVsBestPeer), ratio(s.CPUVsBestPeer), verif)
		}
		p("\n")
	}
	if d := r.Disk; d != nil {
		p("## Local disk (the floor of a durable restore)\n\n")
		p("%s written with direct I/O in 1 MiB writes by %d writers and fsynced, in the scratch area the restores write to: %.2f s (%.0f MiB/s), median of 3.", fmtSize(d.Bytes), d.Writers, d.WallS, d.MiBps)
		if d.FloorVsBestPeer != nil {
			p(" A restore whose files are on disk when it returns cannot take less, which is %.2fx the fastest peer's restore wall time (the peers return with their writes still in the page cache; see \"wall + sync\").", *d.FloorVsBestPeer)
		}
		p("\n\n")
	}
	r.requestsMarkdown(&b)
	if len(r.RSS) > 0 {
		p("## ferry push peak RSS by file size (one file, default settings)\n\n")
		p("| file | wall s | MiB/s | client CPU s/GiB | peak RSS MiB | server CPU s |\n|---|---:|---:|---:|---:|---:|\n")
		for _, x := range r.RSS {
			p("| %s | %.1f | %.0f | %.2f | %.0f | %.1f |\n", fmtSize(x.SizeBytes), x.WallS, mibps(x.SizeBytes, x.WallS), x.CPUPerGiB, x.MaxRSSMiB, x.ServerCPUS)
		}
		p("\n")
	}
	if len(r.BLAKE3) > 0 {
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
	if r.Agent != "" {
		p("## Agent\n\n%s\n\n", r.Agent)
	}
	if len(r.Targets) > 0 {
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
	p("## Tools\n\n| tool | version | settings | verifies content |\n|---|---|---|---|\n")
	for _, t := range r.Tools {
		verif := "no (no content hash; S3 checks only what the SDK sends)"
		if t.Verifies {
			verif = "yes: BLAKE3 per file, CRC32C per part"
		}
		p("| %s | %s | %s | %s |\n", t.Name, t.Version, t.Settings, verif)
	}
	p("\n")
	if len(r.Profiles) > 0 {
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
	if len(r.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	return b.String()
}

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
