package sglangtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/arpatch/arpatch/internal/goroutine"
)

// Network is an in-memory network for test servers: Serve puts a handler
// at an address of its own, and HTTP returns a client that reaches those
// addresses through net.Pipe connections, with no sockets.
//
// Its point is virtual time. Inside a testing/synctest bubble every wait
// on a Network connection blocks durably, so the bubble's fake clock
// advances only when every server stream is waiting for its next token's
// due time and every client has read (and time-stamped) what was sent.
// The Server paces tokens with time.After and the client stamps chunks
// with time.Now, both on that clock: at any concurrency, over any number
// of streams, each chunk is read at exactly the instant it is due, so
// TTFT, E2E, inter-token latencies, decode tok/s and a trial's wall time
// are exact, however loaded the machine. (Over loopback sockets, as
// httptest gives, a bubble cannot tell a socket wait from a stuck one,
// and its clock would not advance.) Tests of verdicts and history use
// it; tests of the real timing path use httptest and the wall clock.
//
// Create a Network inside the bubble that uses it, and Close it before
// the bubble ends (t.Cleanup does), so that no connection's goroutines
// outlive the test.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
	servers   []*http.Server
	conns     []net.Conn
	client    *http.Client
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	n := &Network{listeners: map[string]*pipeListener{}}
	n.client = &http.Client{Transport: &http.Transport{DialContext: n.dial, MaxIdleConnsPerHost: 256}}
	return n
}

// Serve serves h at a new address on the network and returns its base URL
// and a function that stops it (closing its connections), as
// httptest.Server.Close does.
func (n *Network) Serve(h http.Handler) (url string, stop func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr := fmt.Sprintf("sglangtest-%d:80", len(n.servers)+1)
	l := &pipeListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	srv := &http.Server{Handler: h}
	n.servers = append(n.servers, srv)
	goroutine.Go(func() { _ = srv.Serve(l) }) // returns http.ErrServerClosed once stopped
	return "http://" + addr, func() {
		n.mu.Lock()
		delete(n.listeners, addr)
		n.mu.Unlock()
		_ = srv.Close() // closes the in-memory listener and connections: nothing to lose
	}
}

// HTTP is the client for the network's servers. An address no server
// holds is refused, as a closed port is.
func (n *Network) HTTP() *http.Client { return n.client }

// Close stops every server and closes every connection.
func (n *Network) Close() {
	n.client.CloseIdleConnections()
	n.mu.Lock()
	servers, conns := n.servers, n.conns
	n.listeners, n.conns = map[string]*pipeListener{}, nil
	n.mu.Unlock()
	// In-memory listeners and pipes: closing them loses nothing.
	for _, s := range servers {
		_ = s.Close()
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

func (n *Network) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: network, Addr: pipeAddr(addr), Err: errors.New("connection refused (no server at this address on the test network)")}
	if l == nil {
		return nil, refused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
	case <-l.done:
		return nil, refused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n.mu.Lock()
	n.conns = append(n.conns, client, server)
	n.mu.Unlock()
	return client, nil
}

// pipeListener hands the server ends of dialled pipes to http.Server.
type pipeListener struct {
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.addr) }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }
