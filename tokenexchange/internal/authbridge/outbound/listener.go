package outbound

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
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

// sniff reads the client's first bytes, after those already in buf, until they reveal the
// protocol, or timeout passes (silent: more bytes could still change the answer).
func sniff(c net.Conn, buf []byte, timeout time.Duration) (p protocol, prefix []byte, silent bool, err error) {
	if p, done := classify(buf); done {
		return p, buf, false, nil
	}
	buf = slices.Grow(buf, len(h2cPreface)-len(buf))
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return protoOther, buf, false, err
	}
	defer c.SetReadDeadline(time.Time{})
	for len(buf) < len(h2cPreface) {
		n, err := c.Read(buf[len(buf):len(h2cPreface)])
		buf = buf[:len(buf)+n]
		if p, done := classify(buf); done {
			return p, buf, false, nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return protoOther, buf, true, nil
			}
			return protoOther, buf, false, err
		}
	}
	return protoOther, buf, false, nil
}

// firstWord is what came first on a connection where the client was silent past the detection
// timeout: the destination's bytes (a server-first protocol), or the client's.
type firstWord struct {
	fromServer, fromClient []byte
	err                    error
}

// awaitFirstWord reads the client and the destination at once, and returns when either speaks
// (or ends). A late client is not taken for a server-first protocol until the server has
// actually spoken: its HTTP request, however late, is still proxied as HTTP.
func awaitFirstWord(client, upstream net.Conn) firstWord {
	type read struct {
		b   []byte
		err error
	}
	readOne := func(c net.Conn, size int, out chan<- read) {
		b := make([]byte, size)
		n, err := c.Read(b)
		out <- read{b[:n], err}
	}
	fromClient, fromServer := make(chan read, 1), make(chan read, 1)
	go readOne(client, len(h2cPreface), fromClient)
	go readOne(upstream, 32<<10, fromServer)
	// stop unblocks the read of the side that did not speak, and keeps what it read meanwhile.
	stop := func(c net.Conn, ch <-chan read) read {
		_ = c.SetReadDeadline(time.Now())
		r := <-ch
		_ = c.SetReadDeadline(time.Time{})
		if len(r.b) == 0 {
			var ne net.Error
			if errors.As(r.err, &ne) && ne.Timeout() {
				r.err = nil
			}
		}
		return r
	}
	var fw firstWord
	select {
	case s := <-fromServer:
		c := stop(client, fromClient)
		fw.fromServer, fw.fromClient, fw.err = s.b, c.b, errors.Join(c.err, s.err)
		if len(s.b) > 0 && s.err == io.EOF {
			fw.err = c.err // the server spoke, then closed: relayed as such
		}
	case c := <-fromClient:
		s := stop(upstream, fromServer)
		fw.fromServer, fw.fromClient, fw.err = s.b, c.b, errors.Join(c.err, s.err)
	}
	return fw
}

// redirectedConn is a client connection with its original destination and the bytes sniff read,
// or (explicit) a connection made to the proxy itself by a client that uses it as its HTTP proxy,
// whose requests name their destinations (explicit.go).
type redirectedConn struct {
	net.Conn
	dst      netip.AddrPort
	prefix   io.Reader
	explicit bool
	// self is the proxy's listening address, which an explicit request must not name.
	self netip.AddrPort
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
	return relay(client, upstream, prefix, nil)
}

// relay copies bytes both ways between client and upstream, after sending each what the other
// already said, and closes both.
func relay(client, upstream net.Conn, toUpstream, toClient []byte) error {
	for _, w := range []struct {
		to net.Conn
		b  []byte
	}{{upstream, toUpstream}, {client, toClient}} {
		if len(w.b) == 0 {
			continue
		}
		if _, err := w.to.Write(w.b); err != nil {
			client.Close()
			upstream.Close()
			return err
		}
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
