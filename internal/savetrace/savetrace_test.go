package savetrace

import (
	"reflect"
	"strings"
	"testing"
)

const header = `trace: 1
framework: HF Trainer
versions: transformers >=4.36,<=4.47
source: huggingface/transformers@v4.46.3
layout: hf
ranks: 2
step: checkpoint-{step}
`

func TestParseValid(t *testing.T) {
	src := header + `keep: 2   # rotation
flags: --expected-ranks 2 --step-pattern '^checkpoint-(\d+)$' --no-marker

cite src/transformers/trainer.py Trainer._save_checkpoint
r0 mkdir checkpoint-{step}
r* write checkpoint-{step}/rng_state_{rank}.pth 4KiB
r1/bg create checkpoint-{step}/x.bin
r1/bg append checkpoint-{step}/x.bin 100
r1/bg close checkpoint-{step}/x.bin
all barrier
cite src/transformers/trainer.py Trainer._rotate_checkpoints (save_total_limit)
r0 text checkpoint-{step}/trainer_state.json {"global_step": {step}, "a#b": 1}
r0 text checkpoint-{step}/empty
r0 dcp-metadata checkpoint-{step} checkpoint-{step}/.metadata.tmp
r0 rmtree checkpoint-{prev2}
r0 symlink ../checkpoint-{prev1}/x checkpoint-{step}/link
all complete
`
	tr, err := Parse("hf.trace", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name != "hf" || tr.Ranks != 2 || tr.Keep != 2 || tr.Layout != "hf" || tr.Step != "checkpoint-{step}" {
		t.Fatalf("header: %+v", tr)
	}
	wantFlags := []Flag{{"expected-ranks", "2"}, {"step-pattern", `^checkpoint-(\d+)$`}, {"no-marker", ""}}
	if !reflect.DeepEqual(tr.Flags, wantFlags) {
		t.Fatalf("flags %v, want %v", tr.Flags, wantFlags)
	}
	if len(tr.Ops) != 12 {
		t.Fatalf("%d ops, want 12", len(tr.Ops))
	}
	w := tr.Ops[1]
	if w.Kind != Write || !w.Who.Each || w.Size != 4096 || w.Line != 13 || w.Cite.Function != "Trainer._save_checkpoint" {
		t.Fatalf("write op: %+v", w)
	}
	if bg := tr.Ops[2]; bg.Who.Rank != 1 || bg.Who.Thread != "bg" || bg.Who.Actor(1) != "r1/bg" {
		t.Fatalf("bg op: %+v", bg)
	}
	txt := tr.Ops[6]
	if txt.Args[1] != `{"global_step": {step}, "a#b": 1}` || txt.Cite.Function != "Trainer._rotate_checkpoints (save_total_limit)" {
		t.Fatalf("text op args %q cite %+v", txt.Args, txt.Cite)
	}
	if e := tr.Ops[7]; e.Kind != Text || e.Args[1] != "" {
		t.Fatalf("empty text: %+v", e)
	}
	if m := tr.Ops[8]; len(m.Args) != 2 {
		t.Fatalf("dcp-metadata args %q", m.Args)
	}
	got, ok := Expand(txt.Args[1], Vars{Step: 200})
	if !ok || got != `{"global_step": 200, "a#b": 1}` {
		t.Fatalf("expand: %q %v", got, ok)
	}
	if _, ok := Expand("checkpoint-{prev2}", Vars{Step: 300, Prev: []int64{200}}); ok {
		t.Fatal("{prev2} after one save expanded")
	}
	if got, _ := Expand("c-{prev1}/{rank}-{world}-{epoch}", Vars{Step: 300, Prev: []int64{200}, Rank: 1, World: 4}); got != "c-200/1-4-0" {
		t.Fatalf("expand: %q", got)
	}
	if got, _ := Expand("{tmp}/iter_{step:07d}/{prev1:03}", Vars{Step: 300, Prev: []int64{20}}); got != "{tmp}/iter_0000300/020" {
		t.Fatalf("expand padded: %q", got)
	}
}

func TestParseExtensions(t *testing.T) {
	src := strings.Replace(header, "checkpoint-{step}", "iter_{step:07d}", 1) +
		"cite a.py f\nr0 write {tmp}/x 1\nr0 rename {tmp}/x iter_{step:07}/x\nr0 rmtree iter_{prev2:07d}\nall complete\n"
	src = strings.Replace(src, "huggingface/transformers@v4.46.3", "NVIDIA/NeMo@v2.4.0; torch 2.6.0 (Debian 13)", 1)
	tr, err := Parse("x.trace", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Step != "iter_{step:07d}" || tr.Ops[1].Args[0] != "{tmp}/x" {
		t.Fatalf("%+v", tr)
	}
}

func TestParseErrors(t *testing.T) {
	ops := "cite a.py f\nr0 write checkpoint-{step}/a 10\nall complete\n"
	for _, c := range []struct {
		name, src, want string
	}{
		{"unknown op", header + "cite a.py f\nr0 scribble x\n", "t.trace:9: unknown operation \"scribble\""},
		{"missing keys", "trace: 1\nframework: x\n" + ops, "t.trace:3: header: missing versions, source, layout, ranks, step"},
		{"empty file", "", "t.trace:0: header: missing trace"},
		{"no ops", header, "t.trace:7: no operations"},
		{"write arity", header + "cite a.py f\nr0 write checkpoint-{step}/a\n", "t.trace:9: write takes 2 argument(s) (<path> <size>), got 1"},
		{"rename arity", header + "cite a.py f\nr0 rename a b c\n", "t.trace:9: rename takes 2 argument(s)"},
		{"barrier arity", header + "cite a.py f\nall barrier now\n", "t.trace:9: barrier takes 0 argument(s)"},
		{"dcp-metadata arity", header + "cite a.py f\nr0 dcp-metadata a b c\n", "t.trace:9: dcp-metadata takes 1 or 2 arguments"},
		{"unknown placeholder", header + "cite a.py f\nr0 write checkpoint-{stpe}/a 1\n", "t.trace:9: unknown placeholder {stpe}"},
		{"unknown placeholder in text", header + "cite a.py f\nr0 text a {\"s\": {steps}}\n", "t.trace:9: unknown placeholder {steps}"},
		{"prev0", header + "cite a.py f\nr0 remove checkpoint-{prev0}\n", "unknown placeholder {prev0}"},
		{"stray brace", header + "cite a.py f\nr0 write a{b 1\n", "t.trace:9: \"a{b\": a brace that is not a placeholder"},
		{"no cite", header + "r0 write checkpoint-{step}/a 10\n", "t.trace:8: write: no cite line before this group"},
		{"cite arity", header + "cite a.py\n", "t.trace:8: cite needs a repository-relative file and a function"},
		{"rank range", header + "cite a.py f\nr2 write a 1\n", "t.trace:9: r2: rank 2, but ranks: 2"},
		{"bad who", header + "cite a.py f\nrank0 write a 1\n", "t.trace:9: \"rank0\" is not who runs"},
		{"all write", header + "cite a.py f\nall write a 1\n", "t.trace:9: write is run by a rank"},
		{"rank barrier", header + "cite a.py f\nr0 barrier\n", "t.trace:9: barrier is run by all, not r0"},
		{"thread of all", header + "cite a.py f\nall/bg barrier\n", "t.trace:9: all/bg: `all` has no thread"},
		{"bad size", header + "cite a.py f\nr0 write a 4MB\n", "t.trace:9: size \"4MB\""},
		{"dotdot", header + "cite a.py f\nr0 remove ../a\n", "t.trace:9: path \"../a\""},
		{"absolute", header + "cite a.py f\nr0 remove /etc/a\n", "t.trace:9: path \"/etc/a\""},
		{"absolute target", header + "cite a.py f\nr0 symlink /a b\n", "t.trace:9: link target \"/a\""},
		{"append unopened", header + "cite a.py f\nr0 append a 1\n", "t.trace:9: append a: r0 does not hold it open"},
		{"append other rank", header + "cite a.py f\nr0 create a\nr1 append a 1\n", "t.trace:10: append a: r1 does not hold it open"},
		{"never closed", header + "cite a.py f\nr0 create a\nall complete\n", "t.trace:9: r0 a is created and never closed"},
		{"no complete", header + "cite a.py f\nr0 write a 1\n", "t.trace:9: no `all complete`"},
		{"unknown key", "tracee: 1\n" + header, "t.trace:1: unknown header key \"tracee\""},
		{"duplicate key", header + "ranks: 4\n", "t.trace:8: header key \"ranks\" given twice (first on line 6)"},
		{"late key", header + "cite a.py f\nr0 write a 1\nkeep: 2\n", "t.trace:10: header key \"keep\" after the first operation"},
		{"version", strings.Replace(header, "trace: 1", "trace: 2", 1) + ops, "t.trace:1: trace: \"2\": this reader knows format version 1 only"},
		{"source", strings.Replace(header, "huggingface/transformers@v4.46.3", "transformers 4.46", 1) + ops, "t.trace:4: source: \"transformers 4.46\""},
		{"ranks", strings.Replace(header, "ranks: 2", "ranks: 0", 1) + ops, "t.trace:6: ranks: \"0\""},
		{"step", strings.Replace(header, "checkpoint-{step}", "checkpoint", 1) + ops, "t.trace:7: step: \"checkpoint\""},
		{"unknown flag", header + "flags: --keep-local 2\n" + ops, "t.trace:8: flags: --keep-local is not a flag the replay knows"},
		{"flag value", header + "flags: --expected-ranks\n" + ops, "t.trace:8: flags: --expected-ranks needs a value"},
		{"flag bad value", header + "flags: --expected-ranks two\n" + ops, "t.trace:8: flags: --expected-ranks two: want a count"},
		{"flag pattern", header + "flags: --step-pattern '('\n" + ops, "t.trace:8: flags: --step-pattern (:"},
		{"flag quote", header + "flags: --step-pattern '(\n" + ops, "t.trace:8: flags: unclosed ' quote"},
		{"tmp inside", header + "cite a.py f\nr0 write a/{tmp}/x 1\n", "t.trace:9: \"a/{tmp}/x\": {tmp} begins a path"},
		{"tmp alone", header + "cite a.py f\nr0 write {tmp} 1\n", "t.trace:9: \"{tmp}\": {tmp} begins a path"},
		{"tmp in text", header + "cite a.py f\nr0 text a {tmp}\n", "{tmp} begins a path"},
		{"rank width", header + "cite a.py f\nr0 write a{rank:02d} 1\n", "t.trace:9: {rank:02d}: only {step} and {prevN} take a width"},
		{"rank placeholder in all", header + "keep: 1\n" + ops, ""},
		{"deepspeed-world", header + "deepspeed-world: dp=4 mp=1\n" + ops, ""},
		{"deepspeed-world bad", header + "deepspeed-world: dp=4\n" + ops, "t.trace:8: deepspeed-world: \"dp=4\""},
		{"deepspeed-world zero", header + "deepspeed-world: dp=0 mp=1\n" + ops, "t.trace:8: deepspeed-world: \"dp=0 mp=1\""},
		{"torch-save", header + "torch-save: *.bin random_states_*.pkl\n" + ops, ""},
		{"torch-save bad pattern", header + "torch-save: [.bin\n" + ops, "t.trace:8: torch-save: \"[.bin\" is not a file name pattern"},
		{"torch-save path", header + "torch-save: a/*.bin\n" + ops, "t.trace:8: torch-save: \"a/*.bin\" is not a file name pattern"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("dir/t.trace", []byte(c.src))
			if c.want == "" {
				if err != nil {
					t.Fatalf("want no error, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "dir/t.trace:") {
				t.Fatalf("error %v, want one starting dir/t.trace: holding %q", err, c.want)
			}
		})
	}
}

func TestWrittenByTorchSave(t *testing.T) {
	tr := &Trace{TorchSave: []string{"*.bin", "random_states_*.pkl"}}
	for rel, want := range map[string]bool{
		"checkpoint_3/optimizer.bin": true, "checkpoint_3/random_states_1.pkl": true,
		"checkpoint_3/model.safetensors": false, "checkpoint_3/custom_checkpoint_0.pkl": false,
	} {
		if got := tr.WrittenByTorchSave(rel); got != want {
			t.Errorf("WrittenByTorchSave(%q) = %v, want %v", rel, got, want)
		}
	}
}
