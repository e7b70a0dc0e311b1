package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type adminServer struct {
	srv    *http.Server
	ln     net.Listener
	served chan struct{} // closed when Serve has returned
}

// startAdmin serves /healthz (the process is up), /readyz (ready: database
// answering, LISTEN up, first sweep done) and /metrics.
func startAdmin(d *Daemon, addr string) (*adminServer, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(d.m.Registry(), promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin server on %s: %w", addr, err)
	}
	a := &adminServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, served: make(chan struct{})}
	go func() {
		defer close(a.served)
		a.srv.Serve(ln) //nolint:errcheck // returns http.ErrServerClosed on Close
	}()
	return a, nil
}

func (a *adminServer) Addr() string { return a.ln.Addr().String() }

// Close stops serving (in-flight requests get 2 s) and returns once the
// listener is closed and Serve has returned: a stopped daemon answers
// nothing, not even /healthz.
func (a *adminServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		a.srv.Close() //nolint:errcheck // forced: the graceful window is over
	}
	<-a.served
}
