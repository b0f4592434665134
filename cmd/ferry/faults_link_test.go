package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/manifest"
)

// Connections cut in the middle of a body: every connection is reset after
// 1 MB sent (toxiproxy limit_data) while step 200's 11 MiB files upload,
// so each part and PUT breaks mid-body; for 4 s nothing can commit, then
// the link heals and the agent commits the step by itself. Then a restore
// through connections cut after 3 MB received: the ranged GETs break
// mid-body, the restore resumes them and every byte matches.
func TestFaultResetMidBody(t *testing.T) {
	srv := s3test.Shared(t)
	r := startFaultRun(t, srv, srv, 0)
	r.write(100)
	r.waitCommitted(100, time.Minute)

	r.toxic("cut_put", "limit_data", "upstream", map[string]any{"bytes": 1_000_000})
	r.write(200)
	r.notCommittedDuring(200, 4*time.Second)
	r.heal("cut_put")
	r.waitCommitted(200, time.Minute)

	r.toxic("cut_get", "limit_data", "downstream", map[string]any{"bytes": 3_000_000})
	dst := filepath.Join(t.TempDir(), "restored")
	cmd := ferryCmd(t, srv, "restore", "--from", "s3://"+r.bucket+"/run", "--step", "200", "--to", dst)
	cmd.Env = append(cmd.Env, "S3_ENDPOINT_URL="+r.through)
	out := run(t, cmd).must(t, 0)
	r.sameAsTrainer(dst, 200)
	if !containsAll(out.stderr, "retrying ranged GET") {
		t.Errorf("the restore through connections cut after 3 MB logged no retried GET: the fault did not hit it\nstderr: %s", out.stderr)
	}
	r.heal("cut_get")
	problems, all := r.finish()
	logsSay(t, all, "s3 request attempt failed", "UploadPart")
	saysWhatItWillDo(t, problems)
}

// A black-holed link (toxiproxy timeout toxic with no timeout: bytes are
// dropped both ways, nothing is reset) while parts upload: the agent's
// requests fall silent, the idle timeout (FERRY_S3_IDLE_TIMEOUT) fails
// them during the hole (toxiproxy resets the connections when the hole is
// removed, so the test checks that the timeout fired before), and once the
// link is back the retries commit the step. Without the idle timeout a
// hole that never resets hangs the requests for ever.
func TestFaultBlackHolePart(t *testing.T) {
	srv := s3test.Shared(t)
	r := startFaultRun(t, srv, srv, faultIdle)
	r.write(100)
	r.waitCommitted(100, time.Minute)

	// 2 MB/s per connection: the parts are in flight when the hole opens.
	r.toxic("slow", "bandwidth", "upstream", map[string]any{"rate": 2000})
	r.write(200)
	time.Sleep(time.Second)
	r.toxic("hole_up", "timeout", "upstream", map[string]any{"timeout": 0})
	r.toxic("hole_down", "timeout", "downstream", map[string]any{"timeout": 0})
	r.notCommittedDuring(200, faultIdle+4*time.Second)
	healed := time.Now()
	r.heal("hole_up", "hole_down", "slow")
	r.waitCommitted(200, 2*time.Minute)
	problems, all := r.finish()
	loggedBefore(t, all, "silent for", healed)
	saysWhatItWillDo(t, problems)
}

// The manifest PUT black-holed: an s3proxy behind toxiproxy holds step
// 200's manifest PUT for 2 s, and while it is held the link becomes a
// black hole. The PUT reaches the server, its answer is lost; the agent's
// request times out, and its retry after the link heals meets its own
// manifest (create-only PUT answered 412): the step must count as
// committed, with the content the trainer wrote.
func TestFaultBlackHoleManifest(t *testing.T) {
	srv := s3test.Shared(t)
	held := make(chan struct{}, 1)
	view, _ := srv.WithProxy(t, s3proxy.Config{
		Logf: func(string, ...any) {
			select {
			case held <- struct{}{}:
			default:
			}
		},
		Rules: []s3proxy.Rule{{Ops: []string{s3proxy.OpPutObject}, KeyPrefix: manifest.ManifestKey("run", 200),
			Times: 1, Action: s3proxy.Delay(2 * time.Second)}},
	})
	r := startFaultRun(t, view, srv, faultIdle)
	r.write(100)
	r.waitCommitted(100, time.Minute)
	r.write(200)
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("step 200's manifest PUT never reached the proxy")
	}
	r.toxic("hole_up", "timeout", "upstream", map[string]any{"timeout": 0})
	r.toxic("hole_down", "timeout", "downstream", map[string]any{"timeout": 0})
	time.Sleep(faultIdle + 4*time.Second)
	if r.agent.exited() {
		t.Fatalf("the agent exited during the black hole: %v", r.agent.err)
	}
	healed := time.Now()
	r.heal("hole_up", "hole_down")
	r.waitCommitted(200, 2*time.Minute)
	problems, all := r.finish()
	loggedBefore(t, all, "silent for", healed)
	saysWhatItWillDo(t, problems)
}

// The bandwidth falls to 100 kB/s per connection each way for a minute,
// then recovers. Step 200 (two files of 16 MiB, in 5 MiB parts over 4
// connections: 84 s at least at that rate, where 11 MiB files took 63 s,
// too close to the minute) must not commit during that minute, and the
// idle timeout, at its default of a minute, must not take the slow link
// for a dead one: a 5 MiB part takes 52 s to cross. Once the link
// recovers the step commits, with no warning or error at all.
func TestFaultSlowLink(t *testing.T) {
	srv := s3test.Shared(t)
	r := startFaultRun(t, srv, srv, 0)
	r.sim.FileSize = 16<<20 + 4321
	r.write(100)
	r.waitCommitted(100, time.Minute)
	r.toxic("slow_up", "bandwidth", "upstream", map[string]any{"rate": 100})
	r.toxic("slow_down", "bandwidth", "downstream", map[string]any{"rate": 100})
	r.write(200)
	r.notCommittedDuring(200, time.Minute)
	r.heal("slow_up", "slow_down")
	r.waitCommitted(200, time.Minute)
	problems, all := r.finish()
	if len(problems) > 0 {
		t.Errorf("a slow link is not a fault, yet the agent logged:\n%s", problems)
	}
	neverSays(t, all, "silent for")
}

// Latency spikes of 2 to 3 s each way (a round trip of 4 to 6 s) for 10 s
// while a step uploads: slower, and nothing else.
func TestFaultLatencySpikes(t *testing.T) {
	srv := s3test.Shared(t)
	r := startFaultRun(t, srv, srv, 0)
	r.write(100)
	r.waitCommitted(100, time.Minute)
	r.toxic("spike_up", "latency", "upstream", map[string]any{"latency": 2500, "jitter": 500})
	r.toxic("spike_down", "latency", "downstream", map[string]any{"latency": 2500, "jitter": 500})
	r.write(200)
	r.notCommittedDuring(200, 5*time.Second)
	time.Sleep(5 * time.Second)
	r.heal("spike_up", "spike_down")
	r.waitCommitted(200, time.Minute)
	r.write(300)
	r.waitCommitted(300, time.Minute)
	problems, all := r.finish()
	if len(problems) > 0 {
		t.Errorf("latency spikes are not a fault, yet the agent logged:\n%s", problems)
	}
	neverSays(t, all, "silent for")
}

// The credentials rotated while the agent runs: the server is restarted
// with a new key (the old one is refused from then on), and only 3 s later
// does the agent's credential source hand out the new key: the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE), or the JSON a
// credential_process prints (AWS_CONFIG_FILE). The step saved in between
// fails with InvalidAccessKeyId until the source changes; then the agent
// reloads the credentials, says so, and commits it. No restart.
func TestFaultCredentialsRotated(t *testing.T) {
	for _, source := range []string{"shared credentials file", "credential_process"} {
		t.Run(source, func(t *testing.T) { credentialsRotated(t, source == "credential_process") })
	}
}

func credentialsRotated(t *testing.T, process bool) {
	srv := s3test.Start(t, s3test.WithCredentials("ferryoldkey0001", "ferryoldsecret0123456789"))
	dir := t.TempDir()
	creds, config := filepath.Join(dir, "credentials"), filepath.Join(dir, "config")
	writeAtomic := func(path, data string) {
		if err := os.WriteFile(path+".tmp", []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	writeCreds := func(access, secret string) {
		if process {
			writeAtomic(creds, `{"Version": 1, "AccessKeyId": "`+access+`", "SecretAccessKey": "`+secret+`"}`)
			return
		}
		writeAtomic(creds, "[default]\naws_access_key_id = "+access+"\naws_secret_access_key = "+secret+"\n")
	}
	writeCreds(srv.AccessKey, srv.SecretKey)
	env := []string{"AWS_REGION=" + srv.Region, "S3_ENDPOINT_URL=" + srv.Endpoint, "AWS_SHARED_CREDENTIALS_FILE=" + creds}
	if process {
		writeAtomic(config, "[default]\ncredential_process = /bin/cat "+creds+"\n")
		env = []string{"AWS_REGION=" + srv.Region, "S3_ENDPOINT_URL=" + srv.Endpoint, "AWS_CONFIG_FILE=" + config,
			"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "none")}
	}
	bucket := srv.NewBucket(t)
	watch, state := t.TempDir(), t.TempDir()
	agent := startSupervisedAgent(t, env, "--watch", watch, "--to", "s3://"+bucket+"/run", "--state-dir", state,
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", "2", "--metrics-addr", "off")
	r := &faultRun{t: t, st: srv.Store(t, bucket), bucket: bucket, agent: agent, state: state,
		sim: trainsim.Options{Dir: watch, Ranks: 2, FileSize: 3<<20 + 99, Chunk: 1 << 20, Seed: 78}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent output:\n%s", agent.logs.String())
		}
	})
	r.write(100)
	r.waitCommitted(100, time.Minute)

	srv.RotateCredentials(t, "ferrynewkey0002", "ferrynewsecret9876543210")
	r.st = srv.Store(t, bucket)
	r.write(200)
	r.notCommittedDuring(200, 3*time.Second)
	writeCreds(srv.AccessKey, srv.SecretKey)
	r.waitCommitted(200, time.Minute)
	r.write(300)
	r.waitCommitted(300, time.Minute)
	problems, all := r.finish()
	logsSay(t, all, "retrying with the new credentials", "…0002")
	saysWhatItWillDo(t, problems)
	neverSays(t, all, "ferrynewsecret")
}
