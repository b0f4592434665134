package savetrace

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
)

// TestTraces parses every trace of the repository: the frameworks' traces
// (testdata/saveorders, none is fine) and the replay's development
// samples (agent/testdata/savetrace). Any invalid one fails, naming its
// file and line; each must name a layout the agent has.
func TestTraces(t *testing.T) {
	total := 0
	for _, dir := range []string{"../../testdata/saveorders", "../../agent/testdata/savetrace"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.trace"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			tr, err := ParseFile(f)
			if err != nil {
				t.Error(err)
				continue
			}
			if !slices.Contains(detect.LayoutNames(), tr.Layout) {
				t.Errorf("%s: layout %q is not one of ferry's (%v)", f, tr.Layout, detect.LayoutNames())
			}
			total++
		}
		t.Logf("%s: %d traces", dir, len(files))
	}
	if total == 0 {
		t.Log("no traces yet")
	}
}

// TestFrameworkSettingsDocumented checks docs/agent.md's "Settings per
// framework" table against the traces: every trace of testdata/saveorders
// is named in a row whose --layout and flags (positionally, when a row
// names several traces) are the trace's own; --expected-ranks is named
// without its value (it is the node's rank count, the trace's example
// world size divided by the nodes).
func TestFrameworkSettingsDocumented(t *testing.T) {
	rows := settingsRows(t, "../../docs/agent.md")
	files, err := filepath.Glob("../../testdata/saveorders/*.trace")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		tr, err := ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		row, ok := rows[tr.Name]
		if !ok {
			t.Errorf("docs/agent.md, Settings per framework: no row names trace `%s` (%s)", tr.Name, tr.Framework)
			continue
		}
		if row.layout != tr.Layout {
			t.Errorf("docs/agent.md, Settings per framework: %s: --layout %q, the trace replays %q", tr.Name, row.layout, tr.Layout)
		}
		if want := docFlags(tr.Flags); row.flags != want {
			t.Errorf("docs/agent.md, Settings per framework: %s: flags %q, the trace replays %q", tr.Name, row.flags, want)
		}
	}
}

type settingsRow struct{ layout, flags string }

// settingsRows reads the table of the "### Settings per framework"
// section: per trace name, its layout and flags cells.
func settingsRows(t *testing.T, doc string) map[string]settingsRow {
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### Settings per framework\n")
	if !ok {
		t.Fatalf("%s: no section \"### Settings per framework\"", doc)
	}
	sec, _, _ = strings.Cut(sec, "\n### ")
	rows := map[string]settingsRow{}
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 || !strings.HasPrefix(line, "| ") || strings.HasPrefix(cells[1], "trace") {
			continue
		}
		names, layouts, flags := splitCell(cells[1]), splitCell(cells[2]), splitCell(cells[3])
		for i, n := range names {
			rows[n] = settingsRow{layout: pick(layouts, i), flags: pick(flags, i)}
		}
	}
	return rows
}

// splitCell splits a cell's comma-separated values and drops backticks.
func splitCell(c string) []string {
	var out []string
	for _, v := range strings.Split(strings.TrimSpace(c), ", ") {
		out = append(out, strings.ReplaceAll(strings.TrimSpace(v), "`", ""))
	}
	return out
}

// pick is vs[i], or the only value when one serves every trace of a row.
func pick(vs []string, i int) string {
	if len(vs) == 1 {
		return vs[0]
	}
	if i < len(vs) {
		return vs[i]
	}
	return "?"
}

// docFlags writes a trace's flags as the table does.
func docFlags(flags []Flag) string {
	var out []string
	for _, f := range flags {
		switch {
		case f.Name == "expected-ranks" || f.Value == "":
			out = append(out, "--"+f.Name)
		case f.Name == "step-pattern":
			out = append(out, "--"+f.Name+" '"+f.Value+"'")
		default:
			out = append(out, "--"+f.Name+" "+f.Value)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " ")
}
