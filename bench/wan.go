package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// wanLink is the internet between a GPU node and R2 as the bench models
// it: a round-trip time, half of it added each way, and a bandwidth cap on
// each TCP connection each way (one connection carries about window/RTT).
// Every tool, and the agent, reaches the server through it.
type wanLink struct {
	RTT time.Duration `json:"rtt"`
	// Rate is bytes per second per connection, each way; 0: no cap.
	Rate int64 `json:"rate_bytes_per_s"`
}

// parseWAN reads "RTT,RATE" ("80ms,50MB": MB are 10^6 bytes a second).
func parseWAN(s string) (wanLink, error) {
	rtt, rate, ok := strings.Cut(s, ",")
	if !ok {
		return wanLink{}, fmt.Errorf("-wan %q: want RTT,RATE per connection, for example 80ms,50MB", s)
	}
	d, err := time.ParseDuration(rtt)
	if err != nil || d < 0 {
		return wanLink{}, fmt.Errorf("-wan %q: round-trip time %q: want a duration such as 30ms", s, rtt)
	}
	mb, ok := strings.CutSuffix(strings.TrimSpace(rate), "MB")
	n, err := strconv.ParseFloat(mb, 64)
	if !ok || err != nil || n < 0 {
		return wanLink{}, fmt.Errorf("-wan %q: rate %q: want megabytes a second such as 50MB (0MB: no cap)", s, rate)
	}
	return wanLink{RTT: d, Rate: int64(n * 1e6)}, nil
}

func (l wanLink) String() string {
	cap := "no cap"
	if l.Rate > 0 {
		cap = fmt.Sprintf("%.0f MB/s per connection each way", float64(l.Rate)/1e6)
	}
	return fmt.Sprintf("RTT %v (%v each way), %s", l.RTT, l.RTT/2, cap)
}

// toxiproxy is a toxiproxy server with one proxy in front of the S3 server.
type toxiproxy struct {
	cmd  *exec.Cmd
	api  string
	Addr string // where clients connect instead of the server
}

// startWAN starts toxiproxy-server on loopback with a proxy to upstream
// (host:port) shaped as l. TLS passes through: toxiproxy proxies TCP.
func startWAN(bin, upstream string, l wanLink) (*toxiproxy, error) {
	api, err := freeAddr()
	if err != nil {
		return nil, err
	}
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(api)
	tp := &toxiproxy{api: "http://" + api, Addr: listen}
	tp.cmd = exec.Command(bin, "-host", host, "-port", port)
	tp.cmd.Stdout, tp.cmd.Stderr = nil, nil
	tp.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := tp.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start toxiproxy: %w", err)
	}
	if err := tp.setUp(upstream, l); err != nil {
		tp.stop()
		return nil, err
	}
	return tp, nil
}

// setUp waits for the API, creates the proxy and adds its toxics.
func (tp *toxiproxy) setUp(upstream string, l wanLink) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(tp.api + "/version")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("toxiproxy API did not come up: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := tp.post("/proxies", map[string]any{"name": "s3", "listen": tp.Addr, "upstream": upstream, "enabled": true}); err != nil {
		return err
	}
	for _, stream := range []string{"upstream", "downstream"} {
		if l.RTT > 0 {
			if err := tp.post("/proxies/s3/toxics", map[string]any{"name": "latency_" + stream, "type": "latency", "stream": stream,
				"toxicity": 1.0, "attributes": map[string]any{"latency": l.RTT.Milliseconds() / 2, "jitter": 0}}); err != nil {
				return err
			}
		}
		if l.Rate > 0 {
			// toxiproxy's rate is in KB/s of 1,000 bytes, per connection.
			if err := tp.post("/proxies/s3/toxics", map[string]any{"name": "bandwidth_" + stream, "type": "bandwidth", "stream": stream,
				"toxicity": 1.0, "attributes": map[string]any{"rate": l.Rate / 1000}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (tp *toxiproxy) post(path string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := http.Post(tp.api+path, "application/json", bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("toxiproxy %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("toxiproxy %s: %s", path, resp.Status)
	}
	return nil
}

func (tp *toxiproxy) stop() {
	if tp.cmd.Process != nil {
		_ = tp.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = tp.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = tp.cmd.Process.Kill()
			<-done
		}
	}
}

// freeAddr returns a loopback address with a port free a moment ago, for
// a server started next to listen on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
