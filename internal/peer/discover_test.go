package peer

import (
	"context"
	"strings"
	"testing"
)

func TestExpandNodeList(t *testing.T) {
	for list, want := range map[string]string{
		"gpu[01-03,07],login1": "gpu01 gpu02 gpu03 gpu07 login1",
		"n1":                   "n1",
		"a[8-10]-ib":           "a8-ib a9-ib a10-ib",
		"x[1,3],y[002-003]":    "x1 x3 y002 y003",
	} {
		got, err := ExpandNodeList(list)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("ExpandNodeList(%q) = %q, %v; want %q", list, got, err, want)
		}
	}
	for _, bad := range []string{"gpu[3-1]", "gpu]1[", "gpu[a-b]"} {
		if _, err := ExpandNodeList(bad); err == nil {
			t.Errorf("ExpandNodeList(%q): no error", bad)
		}
	}
}

func TestResolve(t *testing.T) {
	got, err := Resolve(context.Background(), "10.0.0.1, 10.0.0.2:9000,host3", "7077")
	if err != nil || strings.Join(got, " ") != "10.0.0.1:7077 10.0.0.2:9000 host3:7077" {
		t.Fatalf("Resolve: %q, %v", got, err)
	}
	t.Setenv("SLURM_JOB_NODELIST", "")
	if _, err := Resolve(context.Background(), "slurm", "7077"); err == nil || !strings.Contains(err.Error(), "SLURM_JOB_NODELIST") {
		t.Fatalf("Resolve slurm outside a job: %v", err)
	}
	t.Setenv("SLURM_JOB_NODELIST", "gpu[1-2]")
	t.Setenv("PATH", "") // no scontrol: expanded here
	got, err = Resolve(context.Background(), "slurm", "7077")
	if err != nil || strings.Join(got, " ") != "gpu1:7077 gpu2:7077" {
		t.Fatalf("Resolve slurm: %q, %v", got, err)
	}
	if _, err := Resolve(context.Background(), " , ", "7077"); err == nil {
		t.Fatal("Resolve of an empty list: no error")
	}
}

func TestSelfIndex(t *testing.T) {
	t.Setenv("SLURMD_NODENAME", "gpu7")
	i, err := SelfIndex(context.Background(), []string{"gpu6:7077", "gpu7:7077", "gpu8:7077"})
	if err != nil || i != 1 {
		t.Fatalf("SelfIndex: %d, %v", i, err)
	}
	if _, err := SelfIndex(context.Background(), []string{"gpu7:1", "gpu7:2"}); err == nil {
		t.Fatal("SelfIndex with this node twice: no error")
	}
	t.Setenv("SLURMD_NODENAME", "")
	if _, err := SelfIndex(context.Background(), []string{"nosuchhost.invalid:1"}); err == nil || !strings.Contains(err.Error(), "--peer-rank") {
		t.Fatalf("SelfIndex of a stranger: %v", err)
	}
}
