package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// report is everything a run found; it is written as bench.json and
// rendered as bench.md.
type report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Host     hostInfo  `json:"host"`
	Command  string    `json:"command"`
	Files    int       `json:"files"`
	FileSize int64     `json:"file_size_bytes"`
	Rounds   int       `json:"rounds"`
	Warmup   int       `json:"warmup"`
	// Scheme is how the tools reach the server: "http" or "https".
	Scheme string `json:"scheme"`
	// Sets are the data sets of the comparison (Files and FileSize above
	// are the big one's).
	Sets []setInfo `json:"sets"`
	// ColdRestores is set when every restore started with the page cache
	// dropped.
	ColdRestores bool `json:"restore_cold_cache"`

	Tools        []toolInfo           `json:"tools"`
	Samples      []sample             `json:"samples"`
	Summary      map[string][]summary `json:"summary"` // by summaryKey(set, phase)
	RSS          []rssResult          `json:"rss,omitempty"`
	Interference []interfCase         `json:"interference,omitempty"`
	BLAKE3       []hashResult         `json:"blake3,omitempty"`
	Disk         *diskResult          `json:"disk,omitempty"`
	B3sumVersion string               `json:"b3sum_version,omitempty"`
	Agent        string               `json:"agent,omitempty"`
	AgentResult  *agentResult         `json:"agent_result,omitempty"`
	Durable      *durableResult       `json:"durable,omitempty"`
	Peers        *peersResult         `json:"peers,omitempty"`
	// InterferenceNet says how the interference phase's server was
	// isolated from the node's cores.
	InterferenceNet string            `json:"interference_network,omitempty"`
	Requests        []requestCount    `json:"requests,omitempty"`
	Targets         []target          `json:"targets"`
	Profiles        map[string]string `json:"profiles,omitempty"`
	Notes           []string          `json:"notes,omitempty"`
	phases          []string
}

type hostInfo struct {
	CPU    string  `json:"cpu"`
	Cores  int     `json:"cores"`
	MemGiB float64 `json:"mem_gib"`
	Kernel string  `json:"kernel"`
	Go     string  `json:"go"`
	// Load averages (1, 5, 15 min) when the run started and ended: the
	// machine is shared, and a busy one slows every tool.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
}

// setInfo describes one data set of the comparison.
type setInfo struct {
	Name     string `json:"name"`
	Files    int    `json:"files"`
	FileSize int64  `json:"file_size_bytes"`
	Folders  int    `json:"folders,omitempty"` // rank folders the files are spread over
}

// describe is the set in a few words, for headings.
func (s setInfo) describe() string {
	d := fmt.Sprintf("%s files, %d x %s", s.Name, s.Files, fmtSize(s.FileSize))
	if s.Folders > 0 {
		d += fmt.Sprintf(" in %d rank folders", s.Folders)
	}
	return d
}

type toolInfo struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Settings string `json:"settings"`
	Verifies bool   `json:"verifies_content_hash"`
}

// summary is one tool in one phase on one data set over the measured
// rounds: medians of wall time, ready time, CPU per GiB and server CPU,
// and the largest peak RSS.
type summary struct {
	Set   string  `json:"set"`
	Tool  string  `json:"tool"`
	Runs  int     `json:"runs"`
	WallS float64 `json:"median_wall_s"`
	// ReadyS (restore) is the median of sample.ReadyS.
	ReadyS     float64 `json:"median_ready_s,omitempty"`
	MiBps      float64 `json:"mib_per_s"`
	CPUPerGiB  float64 `json:"median_cpu_s_per_gib"`
	MaxRSSMiB  float64 `json:"peak_rss_mib"`
	ServerCPUS float64 `json:"median_server_cpu_s"`
	LinkCPUS   float64 `json:"median_link_cpu_s,omitempty"`
	// WallSyncS is the median of wall time plus the sync(2) after the run:
	// time until the data is on the local disk (restore) or the server's.
	WallSyncS float64 `json:"median_wall_plus_sync_s"`
	// Ratios to the best peer of this run on the same set (lowest wall
	// time, ready time and CPU); absent when no peer ran.
	WallVsBestPeer  *float64 `json:"wall_vs_best_peer,omitempty"`
	ReadyVsBestPeer *float64 `json:"ready_vs_best_peer,omitempty"`
	CPUVsBestPeer   *float64 `json:"cpu_vs_best_peer,omitempty"`
	Verifies        bool     `json:"verifies_content_hash"`
}

// target is one goal of the issue, checked against this run.
type target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit"`
	Pass  bool    `json:"pass"`
}

func newReport(cfg Config) *report {
	return &report{
		Started: time.Now().UTC(), Host: readHost(), Command: strings.Join(os.Args, " "),
		Files: cfg.files, FileSize: cfg.size, Rounds: cfg.rounds, Warmup: cfg.warmup, Scheme: scheme(cfg.tls),
		Summary: map[string][]summary{}, phases: []string{"upload", "restore"},
		Profiles: map[string]string{},
	}
}

func scheme(tls bool) string {
	if tls {
		return "https"
	}
	return "http"
}

func (r *report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *report) describeTools(ts *toolset, names []string) {
	for _, n := range names {
		t := ts.get(n)
		r.Tools = append(r.Tools, toolInfo{Name: t.name, Version: t.version, Settings: t.settings, Verifies: t.verifies})
	}
}

// summaryKey is where the summaries of one data set and phase are kept in
// report.Summary: "big/upload", "small/restore", ...
func summaryKey(set, phase string) string { return set + "/" + phase }

// finish computes the summaries and checks the targets.
func (r *report) finish() {
	r.Finished = time.Now().UTC()
	r.Host.LoadEnd = loadavg()
	for _, set := range r.Sets {
		for _, phase := range r.phases {
			rows := r.summarize(set.Name, phase)
			if len(rows) == 0 {
				continue
			}
			bestWall := peerRatios(rows)
			r.Summary[summaryKey(set.Name, phase)] = rows
			if set.Name == bigSet && phase == "restore" && r.Disk != nil && !math.IsInf(bestWall, 1) {
				f := r.Disk.WallS / bestWall
				r.Disk.FloorVsBestPeer = &f
			}
		}
	}
	r.checkTargets()
}

// summarize reduces the measured samples of one data set and phase to one
// row per tool.
func (r *report) summarize(set, phase string) []summary {
	var rows []summary
	for _, t := range r.Tools {
		var walls, ready, cpus, srv, link, synced []float64
		var rss float64
		var bytes int64
		for _, s := range r.Samples {
			if s.Set != set || s.Phase != phase || s.Tool != t.Name || s.Warmup {
				continue
			}
			walls, cpus, srv = append(walls, s.WallS), append(cpus, s.cpuPerGiB()), append(srv, s.ServerCPUS)
			link = append(link, s.LinkCPUS)
			synced = append(synced, s.WallS+s.SyncS)
			if s.ReadyS > 0 {
				ready = append(ready, s.ReadyS)
			}
			rss, bytes = math.Max(rss, s.MaxRSSMiB), s.Bytes
		}
		if len(walls) == 0 {
			continue
		}
		w := median(walls)
		rows = append(rows, summary{Set: set, Tool: t.Name, Runs: len(walls), WallS: w, ReadyS: median(ready),
			MiBps: mibps(bytes, w), CPUPerGiB: median(cpus),
			MaxRSSMiB: rss, ServerCPUS: median(srv), LinkCPUS: median(link), WallSyncS: median(synced), Verifies: t.Verifies})
	}
	return rows
}

// peerRatios sets every row's ratios to the best peer (ferry is nobody's
// peer): the fastest wall and ready times, the lowest CPU. It returns the
// fastest peer's wall time, +Inf when no peer ran.
func peerRatios(rows []summary) float64 {
	bestWall, bestCPU, bestReady := math.Inf(1), math.Inf(1), math.Inf(1)
	for _, s := range rows {
		if s.Tool == "ferry" {
			continue
		}
		bestWall, bestCPU = math.Min(bestWall, s.WallS), math.Min(bestCPU, s.CPUPerGiB)
		if s.ReadyS > 0 {
			bestReady = math.Min(bestReady, s.ReadyS)
		}
	}
	for i := range rows {
		if !math.IsInf(bestWall, 1) {
			w, c := rows[i].WallS/bestWall, rows[i].CPUPerGiB/bestCPU
			rows[i].WallVsBestPeer, rows[i].CPUVsBestPeer = &w, &c
		}
		if rows[i].ReadyS > 0 && !math.IsInf(bestReady, 1) {
			q := rows[i].ReadyS / bestReady
			rows[i].ReadyVsBestPeer = &q
		}
	}
	return bestWall
}

// checkTargets checks the targets of the restore issue (ratios to the
// fastest peer of the same run, default flags): big files ready <= 0.8x and
// restore wall <= 1.0x, many small files push and restore wall <= 0.8x,
// upload wall <= 0.67x and client CPU/GiB <= 0.5x, restore CPU/GiB <= 1.0x;
// peak RSS at most 256 MiB and flat with the file size.
func (r *report) checkTargets() {
	add := func(name string, v, limit float64, unit string) {
		r.Targets = append(r.Targets, target{Name: name, Value: v, Limit: limit, Unit: unit, Pass: v <= limit})
	}
	type ratio struct {
		name  string
		limit float64
		of    func(summary) *float64
	}
	wall := func(s summary) *float64 { return s.WallVsBestPeer }
	ready := func(s summary) *float64 { return s.ReadyVsBestPeer }
	cpu := func(s summary) *float64 { return s.CPUVsBestPeer }
	for _, c := range []struct {
		set, phase string
		ratios     []ratio
	}{
		{bigSet, "upload", []ratio{{"wall time", 0.67, wall}, {"client CPU per GiB", 0.5, cpu}}},
		{bigSet, "restore", []ratio{{"ready time", 0.8, ready}, {"wall time", 1.0, wall}, {"client CPU per GiB", 1.0, cpu}}},
		{smallSet, "upload", []ratio{{"wall time", 0.8, wall}}},
		{smallSet, "restore", []ratio{{"wall time", 0.8, wall}}},
	} {
		for _, s := range r.Summary[summaryKey(c.set, c.phase)] {
			if s.Tool != "ferry" {
				continue
			}
			for _, q := range c.ratios {
				if v := q.of(s); v != nil {
					add(fmt.Sprintf("%s %s: %s vs fastest peer", c.set, c.phase, q.name), *v, q.limit, "x")
				}
			}
			add(fmt.Sprintf("%s %s: peak RSS at defaults", c.set, c.phase), s.MaxRSSMiB, 256, "MiB")
		}
	}
	r.checkRSSTargets(add)
	for _, c := range r.Interference {
		if c.ComputeVsBaseline > 0 && c.Name == "trainer + agent at defaults" {
			// Higher is better: the shortfall from 1 is checked.
			add("trainer compute lost to the agent at defaults", 1-c.ComputeVsBaseline, 0.05, "of baseline")
			add("trainer checkpoint write rate lost to the agent at defaults", 1-c.WriteVsBaseline, 0.10, "of baseline")
		}
	}
	if a := r.AgentResult; a != nil {
		add("idle agent CPU", a.IdleCPUPercent, 1, "% of one core")
	}
	r.checkDurableTargets(add)
}

// checkDurableTargets: time-to-durable of 2 x 256 MiB at 64 MiB/s at most
// 1.5 s at the defaults, and 40% less at the defaults than with
// close-write and the pipeline off on 4 x 1 GiB.
func (r *report) checkDurableTargets(add func(string, float64, float64, string)) {
	d := r.Durable
	if d == nil {
		return
	}
	find := func(name string, cw, pipe bool) (durableCase, bool) {
		for _, c := range d.Cases {
			if c.Name == name && c.CloseWrite == cw && c.Pipeline == pipe {
				return c, true
			}
		}
		return durableCase{}, false
	}
	for _, c := range d.Cases {
		if !c.CloseWrite || !c.Pipeline {
			continue
		}
		if c.Ranks == 2 {
			add("time-to-durable, "+c.Name, c.MedianS, 1.5, "s")
		} else if off, ok := find(c.Name, false, false); ok && off.MedianS > 0 {
			add("time-to-durable at defaults vs close-write and pipeline off, "+c.Name, c.MedianS/off.MedianS, 0.6, "x")
		}
	}
}

// checkRSSTargets: push's and restore's peak RSS stay flat from the
// smallest to the largest single file.
func (r *report) checkRSSTargets(add func(string, float64, float64, string)) {
	for _, op := range []string{"push", "restore"} {
		var rs []rssResult
		for _, x := range r.RSS {
			if x.Op == op {
				rs = append(rs, x)
				add(fmt.Sprintf("%s peak RSS, one %s file", op, fmtSize(x.SizeBytes)), x.MaxRSSMiB, 256, "MiB")
			}
		}
		if len(rs) >= 2 {
			first, last := rs[0], rs[len(rs)-1]
			add(fmt.Sprintf("%s peak RSS growth %s -> %s file", op, fmtSize(first.SizeBytes), fmtSize(last.SizeBytes)),
				last.MaxRSSMiB-first.MaxRSSMiB, 32, "MiB")
		}
	}
}

func (r *report) write(dir string) error {
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	md := r.markdown()
	if err := os.WriteFile(filepath.Join(dir, "bench.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print("\n" + md)
	return nil
}

func readHost() hostInfo {
	h := hostInfo{Cores: runtime.NumCPU(), Go: runtime.Version(), LoadStart: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			h.MemGiB = math.Round(kb/(1<<20)*10) / 10
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	return h
}

// loadavg returns the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
