package testdb

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a database and can freeze: while
// frozen it accepts connections and reads nothing, forwards nothing and
// answers nothing, like a server that is up but hung, or a host behind a
// network partition. Tests use it to prove that ffd's components keep
// their deadlines against a database that never answers.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	thaw   chan struct{}
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// NewProxy starts a proxy in front of db's server; it closes when the
// test ends.
func NewProxy(t testing.TB, db *DB) *Proxy {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("proxy: parse %s: %v", db.URL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: u.Host, thaw: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL is db's URL through the proxy.
func (p *Proxy) URL(db *DB) string {
	u, _ := url.Parse(db.URL)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// Freeze stops all traffic, on open connections and new ones.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen, p.thaw = true, make(chan struct{})
	}
}

// Thaw lets traffic through again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
}

// Close ends every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// gate blocks while the proxy is frozen; false once it is closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	frozen, thaw, closed := p.frozen, p.thaw, p.closed
	p.mu.Unlock()
	if frozen {
		<-thaw
	}
	return !closed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if !p.gate() {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				return
			}
			if !p.track(out) {
				in.Close()
				return
			}
			p.wg.Add(2)
			go p.pipe(out, in)
			go p.pipe(in, out)
		}()
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		if !p.gate() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
