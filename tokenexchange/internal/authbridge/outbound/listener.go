package outbound

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Kinds of traffic the first bytes of a connection reveal.
type protocol int

const (
	protoOther protocol = iota // TLS, a server-first protocol, anything not HTTP: tunnelled untouched
	protoHTTP1
	protoH2C
)

var (
	h2cPreface  = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	httpMethods = [][]byte{[]byte("GET "), []byte("POST "), []byte("PUT "), []byte("DELETE "), []byte("HEAD "),
		[]byte("OPTIONS "), []byte("PATCH "), []byte("TRACE ")}
)

// classify decides from a prefix of the client's first bytes; done is false while more bytes
// could change the answer.
func classify(b []byte) (p protocol, done bool) {
	if len(b) == 0 {
		return protoOther, false
	}
	undecided := false
	if n := min(len(b), len(h2cPreface)); bytes.Equal(b[:n], h2cPreface[:n]) {
		if n == len(h2cPreface) {
			return protoH2C, true
		}
		undecided = true
	}
	for _, m := range httpMethods {
		n := min(len(b), len(m))
		if bytes.Equal(b[:n], m[:n]) {
			if n == len(m) {
				return protoHTTP1, true
			}
			undecided = true
		}
	}
	return protoOther, !undecided
}

// sniff reads the client's first bytes until they reveal the protocol, or timeout passes (a
// client that says nothing is taken for a server-first protocol and tunnelled).
func sniff(c net.Conn, timeout time.Duration) (protocol, []byte, error) {
	buf := make([]byte, 0, len(h2cPreface))
	deadline := time.Now().Add(timeout)
	if err := c.SetReadDeadline(deadline); err != nil {
		return protoOther, nil, err
	}
	defer c.SetReadDeadline(time.Time{})
	for {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if p, done := classify(buf); done {
			return p, buf, nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return protoOther, buf, nil
			}
			return protoOther, buf, err
		}
		if len(buf) == cap(buf) {
			return protoOther, buf, nil
		}
	}
}

// redirectedConn is a client connection with its original destination and the bytes sniff read.
type redirectedConn struct {
	net.Conn
	dst    netip.AddrPort
	prefix io.Reader
}

func (c *redirectedConn) Read(p []byte) (int, error) {
	if c.prefix != nil {
		n, err := c.prefix.Read(p)
		if err == io.EOF {
			c.prefix = nil
			err = nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
	return c.Conn.Read(p)
}

// chanListener hands the HTTP connections to an http.Server.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) push(ctx context.Context, c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	case <-ctx.Done():
		return false
	}
}

func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return l.addr }

// tunnel copies bytes both ways between the client and its original destination, starting with
// the prefix sniff already read from the client.
func tunnel(client net.Conn, prefix []byte, dst netip.AddrPort, dialer *net.Dialer) error {
	upstream, err := dialer.Dial("tcp", dst.String())
	if err != nil {
		client.Close()
		return err
	}
	if _, err := upstream.Write(prefix); err != nil {
		client.Close()
		upstream.Close()
		return err
	}
	var wg sync.WaitGroup
	copyHalf := func(to, from net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(to, from)
		if cw, ok := to.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = to.Close()
		}
	}
	wg.Add(2)
	go copyHalf(upstream, client)
	go copyHalf(client, upstream)
	wg.Wait()
	client.Close()
	upstream.Close()
	return nil
}
