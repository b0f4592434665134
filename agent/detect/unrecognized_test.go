package detect

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A root no layout recognises is warned about once, not once per save:
// each new step-N/ folder changed the list of what the root holds, and the
// warning came again for every save (bench/follow-revisions.sh logged it
// every 0.35 s, while the steps ferry commit declared were uploaded).
func TestUnrecognizedWarnedOnce(t *testing.T) {
	dir := t.TempDir()
	core, logs := observer.New(zapcore.WarnLevel)
	w := newWatcher(t, Options{Dir: dir, Settle: 100 * time.Millisecond, Debounce: 20 * time.Millisecond, Logger: zap.New(core)})
	start(t, w)
	for i := 1; i <= 6; i++ {
		write(t, dir, fmt.Sprintf("step-%d/model.bin", i), "x")
		deadline := time.Now().Add(waitTimeout)
		for w.Unrecognized() == "" || !strings.Contains(w.Unrecognized(), fmt.Sprintf("step-%d/", min(i, 5))) {
			if time.Now().After(deadline) {
				t.Fatalf("save %d: not reported unrecognised: %q", i, w.Unrecognized())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if n := logs.FilterMessageSnippet("no checkpoint layout recognised").Len(); n != 1 {
		t.Fatalf("%d warnings over 6 saves, want 1: %v", n, logs.All())
	}
	if m := logs.All()[0].Message; !strings.Contains(m, "ferry commit") {
		t.Errorf("warning %q does not say declared steps are uploaded", m)
	}
}
