package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// stack is the service under test, wired as cmd/feedd serve wires it: the
// store, the service with its workers running, and the HTTP API on a
// loopback port, driven through the Go client.
type stack struct {
	st   *store.Store
	svc  *service.Service
	reg  *prometheus.Registry
	api  *client.Client
	addr string // the HTTP API's host:port

	echo        *echo.Echo
	serveDone   chan error
	stopWorkers context.CancelFunc
	workersDone chan struct{}
}

// startStack starts the stack; deadline, if not 0, bounds every request
// instead of the API's read and write deadlines.
func startStack(st *store.Store, cfg service.Config, deadline time.Duration, log *slog.Logger) (*stack, error) {
	reg := prometheus.NewRegistry()
	svc, err := service.New(st, cfg, log, service.NewMetrics(reg), time.Now)
	if err != nil {
		return nil, err
	}
	s := &stack{st: st, svc: svc, reg: reg}
	s.startWorkers(svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.close()
		return nil, err
	}
	s.echo = httpapi.New(svc, httpapi.Options{Log: log, Registry: reg, ReadDeadline: deadline, WriteDeadline: deadline})
	s.echo.Listener = ln
	s.serveDone = make(chan error, 1)
	go func() { s.serveDone <- s.echo.Start("") }()
	// Keep enough idle connections for every reader: the default of two per
	// host would make most requests dial.
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     time.Minute,
	}}
	s.addr = ln.Addr().String()
	s.api = client.New("http://"+s.addr, "", hc)
	log.Info("feedbench: service listening", "addr", s.addr, "workers", cfg.Workers,
		"task_size", cfg.TaskSize, "batch_size", cfg.BatchSize, "inbox_limit", cfg.InboxLimit, "inbox_slack", cfg.InboxSlack)
	return s, nil
}

// close stops the HTTP server, then the workers.
func (s *stack) close() error {
	var errs []error
	if s.echo != nil {
		s.svc.CloseStreams()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, s.echo.Shutdown(ctx))
		cancel()
		if err := <-s.serveDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
		s.echo = nil
	}
	s.haltWorkers()
	return errors.Join(errs...)
}

// startWorkers runs svc's workers in the background until haltWorkers.
// Workers of one service at a time: a diagnostic service with other
// settings replaces the stack's own for a while.
func (s *stack) startWorkers(svc *service.Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stopWorkers, s.workersDone = cancel, done
	go func() {
		defer close(done)
		svc.RunWorkers(ctx, service.SoftStopTimeoutDefault)
	}()
}

// haltWorkers stops the running workers and waits for them.
func (s *stack) haltWorkers() {
	if s.stopWorkers != nil {
		s.stopWorkers()
		<-s.workersDone
		s.stopWorkers = nil
	}
}

// waitIdle waits until no delivery, fan-out task, follow event or switch
// is queued: the system is at rest.
func (s *stack) waitIdle(ctx context.Context, timeout time.Duration) error {
	return waitIdle(ctx, s.st, timeout)
}

// waitIdle waits until st has no delivery, fan-out task, follow event or
// switch queued.
func waitIdle(ctx context.Context, st *store.Store, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		idle, err := st.Idle(ctx)
		if err != nil {
			return err
		}
		if idle {
			return nil
		}
		if time.Now().After(deadline) {
			b, err := st.Backlog(ctx)
			if err != nil {
				return err
			}
			return fmt.Errorf("work still queued after %s: %+v", timeout, b)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// counter returns the total of a counter family over all its label values.
func (s *stack) counter(name string) float64 { return counterOf(s.reg, name) }

func counterOf(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// histogram returns the sample sum and count of a histogram family.
func (s *stack) histogram(name string) (sum float64, count uint64) { return histogramOf(s.reg, name) }

func histogramOf(reg *prometheus.Registry, name string) (sum float64, count uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			count += m.GetHistogram().GetSampleCount()
		}
	}
	return sum, count
}
