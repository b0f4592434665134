package bench

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// perfFreq is the sampling rate of the profiles, low enough that perf
// itself costs little of the 2 cores.
const perfFreq = "499"

// profile runs one ferry push and one ferry restore of the data set under
// perf, recording the client (the ferry process) and the server (attached
// to versitygw for the same span) separately, and writes perf report text
// next to bench.md. These runs are not counted in the tables.
func (b *bench) profile(ctx context.Context) error {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return fmt.Errorf("perf not found (Debian: linux-perf)")
	}
	dir, err := filepath.Abs(filepath.Join(b.cfg.outDir, "profiles"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t := b.ts.ferry()
	restoreDir := filepath.Join(b.work, "restore", "profile")
	runs := []struct {
		name string
		c    child
	}{
		{"push", t.upload(b.sets[0].dir, "profile-push")},
		{"restore", t.restore(t.restoreSource, restoreDir)},
	}
	for _, r := range runs {
		settle()
		clientData := filepath.Join(dir, "ferry-"+r.name+".perf.data")
		serverData := filepath.Join(dir, "server-"+r.name+".perf.data")
		srvPerf := exec.CommandContext(ctx, perf, "record", "-q", "-F", perfFreq, "-g", "-o", serverData, "-p", strconv.Itoa(b.srv.pid()))
		srvPerf.Stdout, srvPerf.Stderr = os.Stderr, os.Stderr
		if err := srvPerf.Start(); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond) // let perf attach
		c := r.c
		c.argv = append([]string{perf, "record", "-q", "-F", perfFreq, "-g", "-o", clientData, "--"}, c.argv...)
		s, err := measure(ctx, c, b.srv, nil)
		_ = srvPerf.Process.Signal(syscall.SIGINT)
		_ = srvPerf.Wait()
		if err != nil {
			return err
		}
		log.Printf("profile: ferry %s under perf in %.1f s (client %.1f s CPU, server %.1f s CPU)", r.name, s.WallS, s.UserS+s.SysS, s.ServerCPUS)
		for _, d := range []string{clientData, serverData} {
			txt := d[:len(d)-len(".data")] + ".txt"
			if err := perfReport(ctx, perf, d, txt); err != nil {
				return err
			}
			b.rep.Profiles[filepath.Base(txt)] = txt
		}
	}
	_ = b.srv.removePrefix("profile-push")
	return os.RemoveAll(restoreDir)
}

// perfReport writes the flat profile (self time by shared object and
// symbol) of a perf.data file as text.
func perfReport(ctx context.Context, perf, data, txt string) error {
	out, err := os.Create(txt)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, perf, "report", "-i", data, "--stdio", "--no-children",
		"--sort", "dso,sym", "--percent-limit", "0.5", "-g", "none")
	cmd.Stdout = out
	var errOut tailBuffer
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("perf report %s: %v: %s", data, err, errOut.String())
	}
	return nil
}
