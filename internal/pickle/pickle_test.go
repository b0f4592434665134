package pickle

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// render writes v as testdata/gen.py's render does for the original
// Python value: the oracle is Python's own pickler.
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return fmt.Sprint(x)
	case *big.Int:
		return x.String()
	case float64:
		return fmt.Sprintf("f%d", math.Float64bits(x))
	case string:
		return "s" + hex.EncodeToString([]byte(x))
	case Bytes:
		return "b" + hex.EncodeToString(x)
	case Tuple:
		return "(" + renderAll(x) + ")"
	case *List:
		return "[" + renderAll(x.Items) + "]"
	case *Set:
		return "{" + renderAll(x.Items) + "}"
	case *Dict:
		parts := make([]string, len(x.Items))
		for i, it := range x.Items {
			parts[i] = render(it.Key) + ":" + render(it.Value)
		}
		return "{" + strings.Join(parts, ",") + "}"
	case *Object:
		s := "obj(" + x.Class() + "," + render(x.Args) + ")"
		if x.State != nil {
			s += render(x.State)
		}
		return s
	}
	return fmt.Sprintf("?%T", v)
}

func renderAll(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = render(v)
	}
	return strings.Join(parts, ",")
}

func TestDecodePythonCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/*.pkl")
	if err != nil || len(files) < 30 {
		t.Fatalf("corpus: %d files, %v (run testdata/gen.py)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(f, ".pkl") + ".want")
			if err != nil {
				t.Fatal(err)
			}
			v, err := Decode(data, DefaultLimits)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got := render(v); got != strings.TrimSpace(string(want)) {
				t.Errorf("decoded\n%.300s\nwant (Python's rendering)\n%.300s", got, want)
			}
		})
	}
}

// TestDecodeRefuses: code-running and out-of-band opcodes, truncation at
// every byte, and trailing bytes are errors, never panics or values.
func TestDecodeRefuses(t *testing.T) {
	cases := map[string][]byte{
		"text persid":    []byte("\x80\x02P1\n."),
		"extension":      []byte("\x80\x04\x82\x01."),
		"out of band":    []byte("\x80\x05\x97."),
		"text INT":       []byte("I1\n."),
		"INST":           []byte("(i__main__\nX\n."),
		"protocol 6":     []byte("\x80\x06N."),
		"trailing bytes": []byte("\x80\x04N.N"),
		"two values":     []byte("\x80\x04NN."),
		"open mark":      []byte("\x80\x04(N."),
		"underflow":      []byte("\x80\x04\x86."),
		"get unset memo": []byte("\x80\x04h\x05."),
		"build on int":   []byte("\x80\x04K\x01}b."),
		"huge length":    []byte("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7fabc."),
		"bad utf8":       []byte("\x80\x04\x8c\x01\xff."),
		"no stop":        []byte("\x80\x04N"),
	}
	for name, in := range cases {
		if v, err := Decode(in, DefaultLimits); err == nil {
			t.Errorf("%s: decoded to %s, want an error", name, render(v))
		}
	}
	good, err := os.ReadFile("testdata/p4_objects.pkl")
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		if _, err := Decode(good[:n], DefaultLimits); err == nil {
			t.Fatalf("the first %d of %d bytes decoded without error", n, len(good))
		}
	}
}

// TestDecodeBounded: inputs that ask for much more than they hold hit a
// limit quickly instead of allocating what they declare.
func TestDecodeBounded(t *testing.T) {
	lim := Limits{MaxValues: 1000, MaxMemo: 100, MaxMarks: 10}
	many := append([]byte("\x80\x04("), bytes.Repeat([]byte("N"), 2000)...)
	if _, err := Decode(append(many, "t."...), lim); !errors.Is(err, ErrLimit) {
		t.Errorf("2000 values under a 1000 cap: %v, want ErrLimit", err)
	}
	marks := append([]byte("\x80\x04"), bytes.Repeat([]byte("("), 20)...)
	if _, err := Decode(marks, lim); !errors.Is(err, ErrLimit) {
		t.Errorf("20 nested marks under a cap of 10: %v, want ErrLimit", err)
	}
	if _, err := Decode([]byte("\x80\x04Nr\xff\xff\xff\x7f0N."), lim); !errors.Is(err, ErrLimit) {
		t.Errorf("memo index 2^31-1: %v, want ErrLimit", err)
	}
	// A self-referencing list decodes (the memo shares it) without looping.
	self := []byte("\x80\x04]\x94h\x00a.")
	v, err := Decode(self, lim)
	if err != nil {
		t.Fatal(err)
	}
	if l := v.(*List); len(l.Items) != 1 || l.Items[0] != v {
		t.Errorf("self-referencing list: %#v", v)
	}
}

// FuzzDecode: no input panics, hangs or escapes the limits; seeded with
// the Python corpus.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.pkl")
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil && len(data) < 4096 {
			f.Add(data)
		}
	}
	lim := Limits{MaxValues: 1 << 16, MaxMemo: 1 << 12, MaxMarks: 64}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		if _, err := Decode(data, lim); err != nil && !strings.HasPrefix(err.Error(), "pickle") {
			t.Errorf("error without the pickle prefix: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("decode took %v for %d bytes", d, len(data))
		}
	})
}

// TestDecodeTorchSaveShapes: what torch.save writes around its tensors
// (pickletools.dis of a state dict): a persistent id for each storage is
// a value, and an OrderedDict (a call of collections.OrderedDict, with a
// BUILD of its _metadata attribute) gets the items SETITEMS adds.
func TestDecodeTorchSaveShapes(t *testing.T) {
	// {"module": OrderedDict(w=<storage ("storage", "0")>) with
	// _metadata, "dp": 4, "l": list subclass with two APPENDs}
	data := []byte("\x80\x02}q\x00(X\x06\x00\x00\x00moduleq\x01ccollections\nOrderedDict\nq\x02)Rq\x03" +
		"}X\x09\x00\x00\x00_metadataK\x01sb" +
		"(X\x01\x00\x00\x00wX\x07\x00\x00\x00storageX\x01\x00\x00\x000\x86QuX\x02\x00\x00\x00dpK\x04" +
		"X\x01\x00\x00\x00lcm\nL\n)RK\x01aK\x02au.")
	v, err := Decode(data, DefaultLimits)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	top := v.(*Dict)
	mod, _ := top.Get("module")
	od, ok := mod.(*Object)
	if !ok || od.Class() != "collections.OrderedDict" {
		t.Fatalf("module is %#v, want an OrderedDict object", mod)
	}
	w, ok := od.Items.Get("w")
	if p, isP := w.(Persistent); !ok || !isP || fmt.Sprint(p.ID) != "[storage 0]" {
		t.Fatalf("OrderedDict item w = %#v, want a persistent id (storage, 0)", w)
	}
	if md, ok := od.Attr("_metadata"); !ok || md != int64(1) {
		t.Errorf("_metadata = %v, want 1 from BUILD", md)
	}
	if dp, _ := top.Get("dp"); dp != int64(4) {
		t.Errorf("dp = %v, want 4", dp)
	}
	l, _ := top.Get("l")
	if o, ok := l.(*Object); !ok || len(o.Elems) != 2 || o.Elems[1] != int64(2) {
		t.Errorf("list subclass = %#v, want two appended elements", l)
	}
}
