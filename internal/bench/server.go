package bench

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/internal/tlsca"
	"github.com/ferrylabs/ferry/internal/wanlink"
)

// Credentials of the benchmark server; it listens on loopback only.
const (
	accessKey = "ferrybench"
	secretKey = "ferrybenchsecret0123456789"
	region    = "us-east-1"
	bucket    = "bench"
)

// server is a versitygw over a directory of the scratch area, on the same
// disk as the data set, so that its writes cost what they would anywhere.
type server struct {
	endpoint string
	// caFile is the CA of the server's certificate, for AWS_CA_BUNDLE, when
	// it serves HTTPS; "" for HTTP.
	caFile string
	dir    string // holds the buckets, one directory each
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan struct{}
	// cleanup, when set, runs after the server stopped (its network
	// namespace goes).
	cleanup func()
	// proxyPid, when set, is the toxiproxy in front of the server (-wan),
	// whose CPU is counted apart: on these cores it competes with both.
	proxyPid int
	// accessLog, when set, is the file versitygw logs every request to
	// (--access-log), one line each: the peers phase counts its GETs there.
	accessLog string
}

// startServer starts versitygw on a free loopback port; with accessLog
// set it logs every request there.
func startServer(bin, dir string, useTLS bool, accessLog string) (*server, error) {
	addr, err := wanlink.FreeAddr()
	if err != nil {
		return nil, err
	}
	var extra []string
	if accessLog != "" {
		extra = []string{"--access-log", accessLog}
	}
	s, err := startServerAt(bin, dir, useTLS, addr, nil, extra...)
	if err == nil {
		s.accessLog = accessLog
	}
	return s, err
}

// startServerAt starts versitygw listening on addr, its command line
// prefixed by wrap (for example to run it in a network namespace, pinned
// to a core; each wrapper must exec the next, so that the pid is the
// server's), with extra flags of versitygw's before its backend.
func startServerAt(bin, dir string, useTLS bool, addr string, wrap []string, extra ...string) (*server, error) {
	s := &server{dir: dir, done: make(chan struct{})}
	if err := os.MkdirAll(filepath.Join(dir, bucket), 0o755); err != nil {
		return nil, err
	}
	s.endpoint = "http://" + addr
	args := []string{"--access", accessKey, "--secret", secretKey, "--region", region, "--port", addr, "--quiet", "--keep-alive"}
	client := &http.Client{Timeout: time.Second}
	if useTLS {
		files, err := tlsca.Write(filepath.Join(filepath.Dir(dir), "tls"))
		if err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
		if client, err = tlsClient(files.CA); err != nil {
			return nil, err
		}
		s.endpoint, s.caFile = "https://"+addr, files.CA
		args = append(args, "--cert", files.Cert, "--key", files.Key)
	}
	args = append(args, extra...)
	argv := append(append(append([]string(nil), wrap...), bin), append(args, "posix", dir)...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("versitygw exited: %s", s.out.String())
		default:
		}
		if resp, err := client.Get(s.endpoint + "/"); err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("versitygw did not answer on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tlsClient is an HTTP client trusting the CA in caFile, for the readiness
// probe.
func tlsClient(caFile string) (*http.Client, error) {
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &http.Client{Timeout: time.Second, Transport: tr}, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	if s.cleanup != nil {
		s.cleanup()
	}
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// cpu returns the server's user+system CPU seconds so far, all threads.
func (s *server) cpu() float64 { return procCPU(s.pid()) }

// proxyCPU returns the toxiproxy's user+system CPU seconds so far, 0
// without one.
func (s *server) proxyCPU() float64 {
	if s.proxyPid == 0 {
		return 0
	}
	return procCPU(s.proxyPid)
}

// removePrefix deletes everything stored under prefix, straight from the
// server's directory: no request, so no CPU of any tool is spent on it.
func (s *server) removePrefix(prefix string) error {
	return os.RemoveAll(filepath.Join(s.dir, bucket, prefix))
}

// objectSizes lists what the server holds under prefix, key -> size.
func (s *server) objectSizes(prefix string) (map[string]int64, error) {
	root := filepath.Join(s.dir, bucket, prefix)
	out := map[string]int64{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			out[filepath.ToSlash(rel)] = fi.Size()
		}
		return nil
	})
	return out, err
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

// procCPU reads utime+stime of a running process from /proc/PID/stat, in
// seconds; 0 when the process is gone.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; fields are counted after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}
