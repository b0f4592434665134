package agent

import (
	"context"

	"github.com/ferrylabs/ferry/agent/control"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// Service runs an Agent with the servers that answer for it, all in one
// errgroup: the control socket (status, flush), the metrics endpoint if
// any, and a background task (the systemd watchdog). The servers outlive
// the drain, so status and flush answer until the agent has stopped.
type Service struct {
	Agent   *Agent
	Control *control.Server
	// Metrics may be nil (disabled). Its failure only logs: metrics never
	// stop uploads.
	Metrics *control.MetricsServer
	// Abort, closed after ctx ended (a second signal), stops the drain at
	// once; state stays on disk and uploads resume at the next start.
	Abort <-chan struct{}
	// Ready and Stopping, when set, are told when the agent starts and when
	// its drain begins and ends (systemd's sd_notify).
	Ready, Stopping func()
	// Background, when set, runs until the agent stops.
	Background func(context.Context) error
	Logger     *zap.Logger
}

// Run runs the agent until ctx ends and its drain is over (or Abort is
// closed), or until the control socket fails, whose error is then returned.
func (s *Service) Run(ctx context.Context) error {
	log := s.Logger
	if log == nil {
		log = zap.NewNop()
	}
	srvCtx, stopServers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServers()
	g, gctx := errgroup.WithContext(srvCtx)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var runErr error
	g.Go(func() error {
		defer stopServers()
		runErr = s.Agent.Run(runCtx)
		return nil
	})
	g.Go(func() error { return s.Control.Serve(gctx, s.Agent) })
	if s.Metrics != nil {
		g.Go(func() error {
			if err := s.Metrics.Serve(gctx); err != nil {
				log.Warn("metrics endpoint stopped; uploads go on", zap.Error(err))
			}
			return nil
		})
	}
	if s.Background != nil {
		g.Go(func() error { return s.Background(gctx) })
	}
	g.Go(func() error { s.watch(ctx, gctx, stopRun, log); return nil })
	call(s.Ready)
	err := g.Wait()
	call(s.Stopping)
	if err != nil {
		return err // a server failed: the agent was stopped for it
	}
	if runErr == nil {
		log.Info("agent stopped", zap.Int64("last_committed", s.Agent.Status().LastCommitted))
	}
	return runErr
}

// watch follows the stop signals: ctx ending begins the drain, Abort ends
// it, and a failed server (gctx ending first) stops the agent at once.
func (s *Service) watch(ctx, gctx context.Context, stopRun func(), log *zap.Logger) {
	select {
	case <-ctx.Done():
		call(s.Stopping) // the drain begins
	case <-gctx.Done():
		stopRun()
		s.Agent.Abort()
		return
	}
	select {
	case <-s.Abort:
		log.Warn("second signal: stopping now; uploads resume at the next start")
		s.Agent.Abort()
	case <-gctx.Done():
	}
}

func call(f func()) {
	if f != nil {
		f()
	}
}
