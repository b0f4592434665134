package filestore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/ferrylabs/ferry/internal/filestore"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

// The helper process of the race tests: the test binary run again with
// these variables set puts one object and exits with its outcome.
const (
	envHelper = "FERRY_FILESTORE_RACER" // the store's folder
	envKey    = "FERRY_FILESTORE_KEY"
	envMatch  = "FERRY_FILESTORE_IF_MATCH" // an ETag: If-Match, else create-only
	envBody   = "FERRY_FILESTORE_BODY"
)

// Exit codes of the helper.
const (
	exitWon  = 0
	exitLost = 3
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envStall); dir != "" {
		os.Exit(staller(dir))
	}
	if dir := os.Getenv(envHelper); dir != "" {
		os.Exit(racer(dir))
	}
	os.Exit(m.Run())
}

// envStall runs the helper that stalls in the middle of a Put's body.
const envStall = "FERRY_FILESTORE_STALL"

// stalling is a 2 MiB body whose second half never comes: its second Read
// says "stalled" on stdout (the first MiB is in the temporary file by
// then) and blocks.
type stalling struct{ reads int }

func (b *stalling) Read(p []byte) (int, error) {
	if b.reads++; b.reads > 1 {
		fmt.Println("stalled")
		select {}
	}
	return len(p), nil
}

func (b *stalling) Seek(int64, int) (int64, error) { return 0, nil }

// staller puts a body that stalls halfway, to be killed there.
func staller(dir string) int {
	st, err := filestore.Open(dir, filestore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = st.Put(context.Background(), os.Getenv(envKey), &stalling{}, 2<<20, store.PutOptions{})
	fmt.Fprintln(os.Stderr, "the stalled put returned:", err)
	return 1
}

// racer opens the store, says it is ready, waits for stdin to close, then
// puts its body.
func racer(dir string) int {
	st, err := filestore.Open(dir, filestore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	body := []byte(os.Getenv(envBody))
	opts := store.PutOptions{IfMatch: os.Getenv(envMatch), CRC32C: store.CRC32C(body)}
	opts.IfNoneMatch = opts.IfMatch == ""
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	_, err = st.Put(context.Background(), os.Getenv(envKey), bytes.NewReader(body), int64(len(body)), opts)
	switch {
	case err == nil:
		return exitWon
	case errors.Is(err, store.ErrPreconditionFailed):
		return exitLost
	default:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
}

// raceRounds is how many races each test runs (200, or 20 with -short).
func raceRounds() int {
	if testing.Short() {
		return 20
	}
	return 200
}

// race starts two processes that put key with bodies "racer 0" and
// "racer 1" (create-only, or If-Match ifMatch) at the same moment, and
// checks that exactly one won and the object holds its body.
func race(t *testing.T, st *filestore.Store, key, ifMatch string) {
	t.Helper()
	var cmds [2]*exec.Cmd
	var stdins [2]io.WriteCloser
	for i := range cmds {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envHelper+"="+st.Dir(), envKey+"="+key, envMatch+"="+ifMatch, envBody+"="+fmt.Sprint("racer ", i))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			t.Fatalf("racer %d: %q, %v", i, line, err)
		}
		cmds[i], stdins[i] = cmd, in
	}
	for _, in := range stdins {
		in.Close()
	}
	winner := -1
	for i, cmd := range cmds {
		err := cmd.Wait()
		switch code := cmd.ProcessState.ExitCode(); {
		case code == exitWon && winner >= 0:
			t.Fatalf("%s: racers %d and %d both won", key, winner, i)
		case code == exitWon:
			winner = i
		case code != exitLost:
			t.Fatalf("%s: racer %d: %v", key, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: no racer won", key)
	}
	if got, want := string(storetest.MustGet(t, st, key, 0, -1)), fmt.Sprint("racer ", winner); got != want {
		t.Fatalf("%s holds %q, want the winner's %q", key, got, want)
	}
}

// TestProcessesRaceCreate: two processes creating one key at the same
// moment; link(2) lets exactly one win.
func TestProcessesRaceCreate(t *testing.T) {
	st := newStore(t, "")
	for i := range raceRounds() {
		race(t, st, fmt.Sprintf("step-%d/manifest.json", i), "")
	}
}

// TestProcessesRaceIfMatch: two processes replacing one object, both
// holding the ETag it had; the lock around compare and rename lets exactly
// one win.
func TestProcessesRaceIfMatch(t *testing.T) {
	st := newStore(t, "")
	for i := range raceRounds() {
		key := fmt.Sprintf("step-%d/manifest.json", i)
		info := storetest.MustPut(t, st, key, []byte("committed"))
		race(t, st, key, info.ETag)
	}
}

// TestKilledMidPut: a writer killed in the middle of a Put leaves its
// temporary file, never an object: Head, Get and List see nothing, and
// the key can be created afterwards.
func TestKilledMidPut(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envStall+"="+dir, envKey+"=step-1/model.pt")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "stalled\n" {
		t.Fatalf("stalling writer: %q, %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if left := tempFiles(t, dir); len(left) != 1 {
		t.Fatalf("temporary files after the kill: %q, want the writer's one", left)
	}
	st, err := filestore.Open(dir, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Head(t.Context(), "step-1/model.pt"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Head after the writer died: %v, want ErrNotExist", err)
	}
	if _, err := st.Get(t.Context(), "step-1/model.pt", 0, -1); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Get after the writer died: %v, want ErrNotExist", err)
	}
	err = st.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error {
		t.Errorf("List shows %s after the writer died", o.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("written whole")
	if _, err := st.Put(t.Context(), "step-1/model.pt", bytes.NewReader(data), int64(len(data)), store.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("create after the writer died: %v", err)
	}
}
