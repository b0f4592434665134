package soak

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Versitygw is a versitygw S3 server over a local folder, for a soak run
// outside `go test` (the tests use internal/s3test).
type Versitygw struct {
	Endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
}

const (
	gwAccess = "ferrysoakaccess"
	gwSecret = "ferrysoaksecret0123456789"
	gwRegion = "us-east-1"
)

// StartVersitygw starts bin serving dir on a free loopback port.
func StartVersitygw(bin, dir string) (*Versitygw, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "s3")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	log, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(bin, "--access", gwAccess, "--secret", gwSecret, "--region", gwRegion,
		"--port", addr, "--quiet", "--keep-alive", "posix", data)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	cmd.Stdout, cmd.Stderr = log, log
	// Killed with the driver, should it die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("soak: start %s: %w", bin, err)
	}
	g := &Versitygw{Endpoint: "http://" + addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(g.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return g, nil
		}
		select {
		case <-g.done:
			return nil, fmt.Errorf("soak: versitygw exited at start (see %s)", log.Name())
		default:
		}
		if time.Now().After(deadline) {
			g.Stop()
			return nil, fmt.Errorf("soak: versitygw does not answer on %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Env is the environment ferry needs to reach the server.
func (g *Versitygw) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + gwAccess, "AWS_SECRET_ACCESS_KEY=" + gwSecret,
		"AWS_REGION=" + gwRegion, "S3_ENDPOINT_URL=" + g.Endpoint}
}

// CreateBucket creates bucket on the server.
func (g *Versitygw) CreateBucket(ctx context.Context, bucket string) error {
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(g.Endpoint), Region: gwRegion, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(gwAccess, gwSecret, ""),
	})
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("soak: create bucket %s: %w", bucket, err)
	}
	return nil
}

// Stop stops the server and waits for it to exit.
func (g *Versitygw) Stop() {
	_ = g.cmd.Process.Signal(os.Interrupt)
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}
