package savetrace

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRecordings compares each recording of a real save
// (testdata/saveorders/recorded/NAME.ops, record.sh there) with the
// hand-written trace of the same name: the frameworks' trace in
// testdata/saveorders, skipped while it is absent, and the replay's sample
// in agent/testdata/savetrace. The trace is played for each save of the
// recording, in order ({prevN} from the saves before it), and both are
// normalised: sizes ignored, barriers and complete dropped, text,
// dcp-metadata and hf-index are writes, create/append/close with nothing
// else of the actor between them a write, a remove of a file not there
// dropped (no system call), Python tempfile names matched by pattern.
// Each actor's operations must be the same, in the same order; the order
// between actors is not compared.
func TestRecordings(t *testing.T) {
	recs, err := filepath.Glob("../../testdata/saveorders/recorded/*.ops")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("no recordings in testdata/saveorders/recorded (record.sh writes them)")
	}
	for _, rec := range recs {
		name := strings.TrimSuffix(filepath.Base(rec), ".ops")
		for _, dir := range []string{"../../testdata/saveorders", "../../agent/testdata/savetrace"} {
			path := filepath.Join(dir, name+".trace")
			t.Run(name+"/"+filepath.Base(filepath.Dir(path)), func(t *testing.T) {
				if _, err := os.Stat(path); err != nil {
					t.Skipf("no trace %s yet to compare with the recording %s", path, rec)
				}
				tr, err := ParseFile(path)
				if err != nil {
					t.Fatal(err)
				}
				saves, err := readRecording(rec)
				if err != nil {
					t.Fatal(err)
				}
				if diff := compareRecording(tr, saves); diff != "" {
					t.Errorf("%s differs from the recording %s:\n%s", path, rec, diff)
				}
			})
		}
	}
}

// recOp is one normalised operation: the actor, the kind and the paths.
type recOp struct {
	who, text string
	line      int // the trace's line, 0 for a recording's
}

// recSave is a save of a recording: its step and operations in order.
type recSave struct {
	step int64
	ops  []recOp
}

func readRecording(path string) ([]recSave, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var saves []recSave
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		w := strings.Fields(stripComment(sc.Text()))
		switch {
		case len(w) == 0:
		case w[0] == "save" && len(w) == 2:
			step, err := strconv.ParseInt(w[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, n, err)
			}
			saves = append(saves, recSave{step: step})
		case len(saves) == 0 || len(w) < 3:
			return nil, fmt.Errorf("%s:%d: want `save N` then `<who> <op> <args>`", path, n)
		default:
			kind := w[1]
			args := w[2:]
			if kind == "write" || kind == "append" {
				args = args[:len(args)-1] // the size
			}
			s := &saves[len(saves)-1]
			s.ops = append(s.ops, recOp{who: w[0], text: kind + " " + strings.Join(args, " ")})
		}
	}
	return saves, sc.Err()
}

// world is the number of ranks a recording shows.
func world(saves []recSave) int {
	n := 1
	for _, s := range saves {
		for _, op := range s.ops {
			r, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(op.who, "/")[0], "r"))
			n = max(n, r+1)
		}
	}
	return n
}

// compareRecording plays tr for each save of the recording and returns
// the differences, "" for none.
func compareRecording(tr *Trace, saves []recSave) string {
	fs := map[string]bool{}
	var begun []int64
	var diffs []string
	w := world(saves)
	for _, s := range saves {
		v := Vars{Step: s.step, World: w}
		for i := len(begun) - 1; i >= 0; i-- {
			if begun[i] != s.step {
				v.Prev = append(v.Prev, begun[i])
			}
		}
		begun = append(begun, s.step)
		want := normalise(playOnto(tr, v, w, fs))
		got := normalise(s.ops)
		for _, who := range actors(want, got) {
			if d := diffActor(who, of(want, who), of(got, who)); d != "" {
				diffs = append(diffs, fmt.Sprintf("save %d, %s", s.step, d))
			}
		}
	}
	return strings.Join(diffs, "\n")
}

// playOnto expands tr's ops for one save, in the trace's order, onto the
// set of paths that exist (fs), dropping what makes no system call.
func playOnto(tr *Trace, v Vars, world int, fs map[string]bool) []recOp {
	var out []recOp
	for _, op := range tr.Ops {
		if op.Who.All {
			continue
		}
		ranks := []int{op.Who.Rank}
		if op.Who.Each {
			ranks = nil
			for r := range world {
				ranks = append(ranks, r)
			}
		}
		for _, r := range ranks {
			v.Rank = r
			args, ok := expandArgs(op, v)
			if !ok || !apply(op.Kind, args, fs) || outside(op.Kind, args) {
				continue
			}
			kind := string(op.Kind)
			switch op.Kind {
			case Text:
				kind, args = "write", args[:1]
			case DCPMetadata, HFIndex:
				kind, args = "write", []string{outPath(op.Kind, args)}
			}
			out = append(out, recOp{who: op.Who.Actor(r), text: kind + " " + strings.Join(args, " "), line: op.Line})
		}
	}
	return out
}

// outside reports whether an operation names only paths outside the
// watch dir ({tmp}), which the recording does not show; a rename from
// there shows as from "(outside)", as convert.py writes it.
func outside(k Kind, args []string) bool {
	if k == Rename && strings.HasPrefix(args[0], Tmp) {
		args[0] = "(outside)"
		return false
	}
	p := args[0]
	if k == Symlink {
		p = args[1]
	}
	return strings.HasPrefix(p, Tmp)
}

func expandArgs(op Op, v Vars) ([]string, bool) {
	var out []string
	for _, a := range op.Args {
		e, ok := Expand(a, v)
		if !ok {
			return nil, false
		}
		out = append(out, e)
	}
	return out, true
}

func outPath(k Kind, args []string) string {
	if len(args) > 1 {
		return args[1]
	}
	if k == DCPMetadata {
		return args[0] + "/.metadata"
	}
	return args[0] + "/model.safetensors.index.json"
}

// apply runs an operation on the set of existing paths and reports
// whether it makes a system call (a remove of a missing file does not).
func apply(k Kind, args []string, fs map[string]bool) bool {
	switch k {
	case RaiseIfExists:
		return false // a check, no file operation
	case Remove:
		if !fs[args[0]] {
			return false
		}
		delete(fs, args[0])
	case Rmtree:
		for p := range fs {
			if p == args[0] || strings.HasPrefix(p, args[0]+"/") {
				delete(fs, p)
			}
		}
	case Rename:
		for p := range fs {
			if p == args[0] || strings.HasPrefix(p, args[0]+"/") {
				delete(fs, p)
				fs[args[1]+strings.TrimPrefix(p, args[0])] = true
			}
		}
	case DCPMetadata, HFIndex:
		fs[outPath(k, args)] = true
	case Symlink:
		fs[args[1]] = true
	default:
		fs[args[0]] = true
	}
	return true
}

// tempName matches the names Python's tempfile makes (mkstemp's "tmp" and
// eight random letters, digits or _), which a trace writes as any such name.
var tempName = regexp.MustCompile(`(^|/| )tmp[A-Za-z0-9_]{8}(/| |$)`)

// normalise collapses create/append.../close with nothing else of the
// actor between into write, merges consecutive appends and names temp
// files by pattern.
func normalise(ops []recOp) []recOp {
	var out []recOp
	open := map[string]int{} // who+path -> index in out of its create
	for _, op := range ops {
		op.text = tempName.ReplaceAllString(op.text, "${1}tmp<random>${2}")
		kind, path, _ := strings.Cut(op.text, " ")
		key := op.who + " " + path
		last := -1
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].who == op.who {
				last = i
				break
			}
		}
		switch kind {
		case "create":
			open[key] = len(out)
		case "append":
			if c, ok := open[key]; ok && (last == c || out[last].text == op.text) {
				continue // part of the write, or of the append before
			}
		case "close":
			if c, ok := open[key]; ok && last == c {
				delete(open, key)
				out[c].text = "write " + path
				continue
			}
			delete(open, key)
		}
		out = append(out, op)
	}
	return out
}

func actors(a, b []recOp) []string {
	var out []string
	for _, op := range append(append([]recOp(nil), a...), b...) {
		if !slices.Contains(out, op.who) {
			out = append(out, op.who)
		}
	}
	slices.Sort(out)
	return out
}

func of(ops []recOp, who string) []recOp {
	var out []recOp
	for _, op := range ops {
		if op.who == who {
			out = append(out, op)
		}
	}
	return out
}

// diffActor names the first difference of one actor's operations.
func diffActor(who string, want, got []recOp) string {
	for i := range max(len(want), len(got)) {
		var w, g string
		line := ""
		if i < len(want) {
			w, line = want[i].text, fmt.Sprintf(" (trace line %d)", want[i].line)
		}
		if i < len(got) {
			g = got[i].text
		}
		if w != g {
			return fmt.Sprintf("%s, operation %d: the trace has %q%s, the recording %q", who, i+1, w, line, g)
		}
	}
	return ""
}
