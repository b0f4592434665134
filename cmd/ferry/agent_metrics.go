package main

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/control"
)

// The agent's metrics endpoint: its registry, the address it binds and
// the probes it answers (/healthz, /readyz).

// agentMetrics returns the agent's Prometheus registry and metrics. The
// registry also holds the Go runtime's and the process's own figures
// (go_goroutines, process_resident_memory_bytes, process_open_fds): what
// shows a leak in an agent that runs for weeks (make soak reads them).
func agentMetrics() (*prometheus.Registry, *control.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, control.NewMetrics(reg)
}

// optionalMetrics is the metrics endpoint, or nil when it is off or no
// address could be bound: metrics are optional and never stop uploads.
type optionalMetrics struct{ *control.MetricsServer }

func (m optionalMetrics) addr() string {
	if m.MetricsServer == nil {
		return ""
	}
	return m.Addr()
}

func (m optionalMetrics) close() {
	if m.MetricsServer != nil {
		_ = m.Close()
	}
}

// listenMetrics binds the metrics address. An address the operator chose
// that is taken fails the start, naming it: a scraper or health check
// pointed there would read whatever process holds it as this agent's
// answers. The default one taken (several agents on a node) is a warning,
// naming both, and a free port on the same host, which `ferry status`
// shows. Other failures disable metrics with a warning: they never stop
// uploads.
func listenMetrics(addr string, chosen bool, reg *prometheus.Registry, probes control.Probes, log *zap.Logger) (optionalMetrics, error) {
	if addr == "" || addr == "off" {
		return optionalMetrics{}, nil
	}
	m, err := control.ListenMetrics(addr, reg, probes, log)
	if err == nil {
		return optionalMetrics{m}, nil
	}
	if chosen && errors.Is(err, syscall.EADDRINUSE) {
		return optionalMetrics{}, fmt.Errorf("metrics address %s is taken by another process (a scraper there would read its answers as this agent's): give a free one with --metrics-addr or FERRY_METRICS_ADDR, or off", addr)
	}
	host, _, serr := net.SplitHostPort(addr)
	if serr == nil && !chosen {
		if alt, aerr := control.ListenMetrics(net.JoinHostPort(host, "0"), reg, probes, log); aerr == nil {
			log.Warn("default metrics address taken; serving metrics on a free port instead (ferry status shows it; --metrics-addr chooses one)",
				zap.String("wanted", addr), zap.String("addr", alt.Addr()), zap.Error(err))
			return optionalMetrics{alt}, nil
		}
	}
	log.Warn("metrics disabled: cannot listen; uploads go on", zap.String("addr", addr), zap.Error(err))
	return optionalMetrics{}, nil
}

// readiness answers /readyz for the agent, which is created after the
// metrics endpoint is bound (status names its address).
type readiness struct{ agent atomic.Pointer[agent.Agent] }

// probes are the endpoint's: /healthz is ok while the process serves it
// (a restart would not help an agent whose store is down), /readyz asks
// the agent.
func (r *readiness) probes() control.Probes {
	return control.Probes{Ready: func() error {
		a := r.agent.Load()
		if a == nil {
			return errors.New("starting")
		}
		return a.Ready()
	}}
}
