package fetch_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/fetch"
)

func server(t *testing.T, h http.HandlerFunc) (string, int32) {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	host, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return host, int32(p)
}

func TestFallsBackToLegacyPathOn404AndUsesETag(t *testing.T) {
	var sawINM string
	ip, port := server(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "application/json", r.Header.Get("Accept"))
		if r.URL.Path != fetch.PathLegacy {
			http.NotFound(w, r)
			return
		}
		sawINM = r.Header.Get("If-None-Match")
		w.Header().Set("ETag", `"v1"`)
		if sawINM == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	})
	f := fetch.New(2, time.Second)
	req := fetch.Request{Scheme: "http", PodIP: ip, Port: port, Paths: []string{fetch.PathAgentCard, fetch.PathLegacy}}
	resp, err := f.Fetch(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, fetch.PathLegacy, resp.Path)
	assert.Equal(t, `"v1"`, resp.ETag)
	assert.False(t, resp.NotModified)

	req.ETag, req.ETagPath = resp.ETag, resp.Path
	resp, err = f.Fetch(context.Background(), req)
	require.NoError(t, err)
	assert.True(t, resp.NotModified)
	assert.Equal(t, `"v1"`, sawINM)
}

func TestFailures(t *testing.T) {
	f := fetch.New(2, 2*time.Second)
	cases := []struct {
		name string
		h    http.HandlerFunc
		kind string
	}{
		{"404 everywhere", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, "NotFound"},
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, "HTTPError"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "http://10.0.0.1/", 302) }, "Redirect"},
		{"too large", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(make([]byte, fetch.MaxBodyBytes+1)) }, "TooLarge"},
		{"slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "Timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ip, port := server(t, c.h)
			_, err := f.Fetch(context.Background(), fetch.Request{Scheme: "http", PodIP: ip, Port: port, Paths: []string{fetch.PathAgentCard, fetch.PathLegacy}})
			require.Error(t, err)
			assert.Equal(t, c.kind, fetch.KindOf(err), err.Error())
		})
	}
	_, err := f.Fetch(context.Background(), fetch.Request{Scheme: "http", PodIP: "weather.example.com", Port: 80, Paths: []string{"/"}})
	assert.Equal(t, "InvalidPodIP", fetch.KindOf(err), "only IP addresses are ever contacted")
}

// Nothing a pod sends is kept unbounded: an ETag longer than MaxETagBytes is dropped (the next
// fetch is unconditional), headers beyond MaxHeaderBytes are refused unread, and error messages
// carry neither the pod's reason phrase nor more than a bounded part of its Location header.
func TestBoundsWhatThePodSends(t *testing.T) {
	f := fetch.New(2, 10*time.Second) // the 8 MiB header takes a while to write on a busy machine
	get := func(h http.HandlerFunc) (*fetch.Response, error) {
		ip, port := server(t, h)
		return f.Fetch(context.Background(), fetch.Request{Scheme: "http", PodIP: ip, Port: port, Paths: []string{fetch.PathAgentCard}})
	}

	long := `"` + strings.Repeat("e", fetch.MaxETagBytes) + `"`
	resp, err := get(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", long)
		_, _ = w.Write([]byte(`{}`))
	})
	require.NoError(t, err)
	assert.Empty(t, resp.ETag, "an ETag of %d bytes must not be kept", len(long))

	fits := `"` + strings.Repeat("e", fetch.MaxETagBytes-2) + `"`
	resp, err = get(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", fits)
		_, _ = w.Write([]byte(`{}`))
	})
	require.NoError(t, err)
	assert.Equal(t, fits, resp.ETag)

	_, err = get(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"`+strings.Repeat("e", 8<<20)+`"`)
		_, _ = w.Write([]byte(`{}`))
	})
	require.Error(t, err)
	assert.Equal(t, "TooLarge", fetch.KindOf(err), err.Error())
	assert.Contains(t, err.Error(), "headers larger than")

	_, err = get(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "http://10.0.0.1/"+strings.Repeat("l", 8<<10))
		w.WriteHeader(http.StatusFound)
	})
	require.Error(t, err)
	assert.Equal(t, "Redirect", fetch.KindOf(err))
	assert.Less(t, len(err.Error()), 512, "the Location header is cut in the message")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// Answer after the request, with a reason phrase net/http's server would not send.
			if _, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
				_, _ = conn.Write([]byte("HTTP/1.1 500 " + strings.Repeat("<", 4<<10) + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}
			_ = conn.Close()
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	_, err = f.Fetch(context.Background(), fetch.Request{Scheme: "http", PodIP: addr.IP.String(), Port: int32(addr.Port), Paths: []string{fetch.PathAgentCard}})
	require.Error(t, err)
	assert.Equal(t, "HTTPError", fetch.KindOf(err))
	assert.NotContains(t, err.Error(), "<", "the pod's reason phrase is not repeated")
	assert.Contains(t, err.Error(), "HTTP 500 Internal Server Error")
}

// TestKeepsNoConnectionOpen: once a fetch has returned, its connection is closed (a kept-alive
// connection would sit idle for a whole sync period, holding two goroutines and its buffers).
func TestKeepsNoConnectionOpen(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != fetch.PathLegacy {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	host, portStr, _ := net.SplitHostPort(s.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	f := fetch.New(2, time.Second)
	// The first path answers 404: the fallback's second request must not leave one open either.
	_, err := f.Fetch(context.Background(), fetch.Request{Scheme: "http", PodIP: host, Port: int32(port), Paths: []string{fetch.PathAgentCard, fetch.PathLegacy}})
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(open) == 0
	}, 20*time.Second, 10*time.Millisecond, "the server still has a connection of the fetcher open")
}
