package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminServer serves /healthz (the process is up), /readyz (ready:
// database answering, LISTEN up, first sweep done, no sweep step failing;
// a 503 says which is not) and /metrics.
type adminServer struct {
	addr     string
	notReady func() string
	m        *Metrics
	extra    http.Handler // the console, when enabled: served at /
	srv      *http.Server
	ln       net.Listener
	served   chan struct{} // closed when Serve has returned
}

// Start listens on the address and serves in the background; it fails
// when the address cannot be bound.
func (a *adminServer) Start(context.Context) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := a.notReady(); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.m.Registry(), promhttp.HandlerOpts{}))
	if a.extra != nil {
		mux.Handle("/", a.extra)
	}
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		return fmt.Errorf("admin server on %s: %w", a.addr, err)
	}
	a.ln, a.served = ln, make(chan struct{})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(a.served)
		a.srv.Serve(ln) //nolint:errcheck // returns http.ErrServerClosed on Stop
	}()
	return nil
}

// Addr is the address it listens on (the port resolved).
func (a *adminServer) Addr() string { return a.ln.Addr().String() }

// Stop stops serving (in-flight requests get until ctx ends) and returns
// once the listener is closed and Serve has returned: a stopped daemon
// answers nothing, not even /healthz. It returns ctx's error when
// requests had to be cut.
func (a *adminServer) Stop(ctx context.Context) error {
	if a.srv == nil {
		return nil
	}
	err := a.srv.Shutdown(ctx)
	if err != nil {
		a.srv.Close() //nolint:errcheck // forced: the graceful window is over
	}
	<-a.served
	a.srv = nil
	return err
}
