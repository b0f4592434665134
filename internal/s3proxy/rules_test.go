package s3proxy

import (
	"slices"
	"testing"
	"time"
)

func TestPickAfterTimes(t *testing.T) {
	p, err := New("http://127.0.0.1:1", Config{Rules: []Rule{
		{Ops: []string{OpUploadPart}, After: 1, Times: 2, Action: SlowDown()},
		{KeyPrefix: "data/", Action: Delay(time.Millisecond)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 5 {
		got = append(got, p.pick(OpUploadPart, "data/x").String())
	}
	want := []string{"delay 1ms", "status 503 SlowDown", "status 503 SlowDown", "delay 1ms", "delay 1ms"}
	if !slices.Equal(got, want) {
		t.Errorf("actions %q, want %q", got, want)
	}
	if a := p.pick(OpGetObject, "manifests/1"); a.kind != actForward {
		t.Errorf("unmatched request got %v", a)
	}
	if err := p.SetRules(Rule{Ops: []string{OpGetObject}, Times: 1, Action: FlipByte(3)}); err != nil {
		t.Fatal(err)
	}
	if a := p.pick(OpUploadPart, "data/x"); a.kind != actForward {
		t.Errorf("old rule still fires after SetRules: %v", a)
	}
	if a := p.pick(OpGetObject, "k"); a.String() != "flip body byte 3" {
		t.Errorf("new rule: %v", a)
	}
}

// TestPickSeeded checks that a seed reproduces the faults a probability
// draws, so a failure seen once can be replayed.
func TestPickSeeded(t *testing.T) {
	draw := func(seed int64) []bool {
		p, err := New("http://127.0.0.1:1", Config{Seed: seed, Rules: []Rule{{Probability: 0.3, Action: InternalError()}}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Seed() != seed {
			t.Fatalf("Seed() = %d, want %d", p.Seed(), seed)
		}
		var fired []bool
		for range 200 {
			fired = append(fired, p.pick(OpGetObject, "k").kind == actStatus)
		}
		return fired
	}
	a, b := draw(42), draw(42)
	if !slices.Equal(a, b) {
		t.Error("the same seed drew different faults")
	}
	n := 0
	for _, f := range a {
		if f {
			n++
		}
	}
	if n < 30 || n > 90 {
		t.Errorf("probability 0.3 fired %d times in 200", n)
	}
}

func TestRuleValidation(t *testing.T) {
	for _, r := range []Rule{
		{Probability: 1.5},
		{Times: -1},
		{Action: Status(42, "X")},
		{Action: Delay(-time.Second)},
		{Action: TruncateBody(-1)},
	} {
		if _, err := New("http://127.0.0.1:1", Config{Rules: []Rule{r}}); err == nil {
			t.Errorf("rule %v accepted", r)
		}
	}
	for _, target := range []string{"127.0.0.1:1", "ftp://x", "http://"} {
		if _, err := New(target, Config{}); err == nil {
			t.Errorf("target %q accepted", target)
		}
	}
}
