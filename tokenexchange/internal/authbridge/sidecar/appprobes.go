package sidecar

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/pkg/configmap/appprobe"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// appProbeHost is where the app is probed: loopback, whose traffic neither the inbound redirect
// (prerouting: only packets that arrive on an interface) nor the outbound one (loopback
// destinations return) touches, so the probe reaches the app itself, never a proxy.
const appProbeHost = "127.0.0.1"

// defaultProbeTimeout is the kubelet's when a probe sets none.
const defaultProbeTimeout = time.Second

// maxProbeBody bounds what is read of the app's answer: the kubelet reads at most 10 KiB of it.
const maxProbeBody = 10 << 10

// AppProbeHandler serves GET contract.AppProbePathPrefix + "<container>/<kind>": the original
// probe the injector rewrote into that path (probes, by contract.AppProbeKey, from the identity
// defaults' contract.AppProbesVariable), run against the app on 127.0.0.1 as the kubelet would
// have run it: httpGet with its path, headers and scheme (HTTPS without verifying the
// certificate, as the kubelet does), tcpSocket as a connect, grpc as a grpc.health.v1 Check, each
// within the probe's timeout. 200 when the app passes, 503 with the reason when it fails, 404 for
// a path that names no recorded probe: only the probes the injector recorded are run, so the
// status port cannot be used to reach any other port or path of the app without a token.
func AppProbeHandler(probes map[string]appprobe.AppProbe) http.Handler {
	// One transport for every HTTP probe: no proxy from the environment (the app is local), no
	// kept-alive connections (each probe connects afresh, as the kubelet's do).
	httpTransport := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify a probe's certificate either
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	grpcTransport := &http.Transport{Proxy: nil, DisableKeepAlives: true, Protocols: &h2c}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	httpClient := &http.Client{Transport: httpTransport, CheckRedirect: noRedirect}
	grpcClient := &http.Client{Transport: grpcTransport, CheckRedirect: noRedirect}

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := probes[strings.TrimPrefix(r.URL.Path, contract.AppProbePathPrefix)]
		if !ok || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		timeout := defaultProbeTimeout
		if p.TimeoutSeconds > 0 {
			timeout = time.Duration(p.TimeoutSeconds) * time.Second
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		addr := net.JoinHostPort(appProbeHost, strconv.Itoa(int(p.Port())))
		var err error
		switch {
		case p.HTTPGet != nil:
			err = probeHTTP(ctx, httpClient, addr, p.HTTPGet, r.UserAgent())
		case p.TCPSocket != nil:
			err = probeTCP(ctx, addr)
		case p.GRPC != nil:
			service := ""
			if p.GRPC.Service != nil {
				service = *p.GRPC.Service
			}
			err = probeGRPC(ctx, grpcClient, addr, service)
		default:
			err = errors.New("no handler the data plane runs")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "app probe failed: %v\n", err)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
}

// probeHTTP passes when the app answers 200–399, the kubelet's rule (a redirect is not followed:
// its target may be another host, which the kubelet too counts as a success).
func probeHTTP(ctx context.Context, c *http.Client, addr string, get *corev1.HTTPGetAction, userAgent string) error {
	scheme := "http"
	if get.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	path := get.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+path, nil)
	if err != nil {
		return err
	}
	if userAgent != "" {
		req.Header.Set("User-Agent", userAgent) // the kubelet's kube-probe/<version>
	}
	req.Header.Set("Accept", "*/*")
	for _, h := range get.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
		return fmt.Errorf("HTTP probe of %s%s: status %d", addr, path, resp.StatusCode)
	}
	return nil
}

// probeTCP passes when a connection opens.
func probeTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// probeGRPC runs grpc.health.v1.Health/Check for service over HTTP/2 without TLS (h2c, as the
// kubelet's gRPC probe: it never uses TLS) and passes when the app answers SERVING. The one unary
// call is written with the standard library's HTTP/2 client: a 5-byte gRPC frame header and a
// one-field protobuf message each way, which does not justify linking grpc-go into every pod.
func probeGRPC(ctx context.Context, c *http.Client, addr, service string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/grpc.health.v1.Health/Check",
		bytes.NewReader(grpcFrame(healthCheckRequest(service))))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("gRPC probe of %s: HTTP status %d", addr, resp.StatusCode)
	}
	// A trailers-only answer (an error) carries grpc-status among the headers.
	status := resp.Trailer.Get("Grpc-Status")
	if status == "" {
		status = resp.Header.Get("Grpc-Status")
	}
	if status != "0" {
		msg := resp.Trailer.Get("Grpc-Message") + resp.Header.Get("Grpc-Message")
		return fmt.Errorf("gRPC probe of %s: grpc-status %q %s", addr, status, msg)
	}
	serving, err := healthCheckServing(body)
	if err != nil {
		return fmt.Errorf("gRPC probe of %s: %w", addr, err)
	}
	if !serving {
		return fmt.Errorf("gRPC probe of %s: service %q is not SERVING", addr, service)
	}
	return nil
}

// grpcFrame is msg as one uncompressed gRPC message: flag 0, 4-byte big-endian length, msg.
func grpcFrame(msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// healthCheckRequest encodes grpc.health.v1.HealthCheckRequest{service}: field 1, a string (wire
// type 2), left out when empty as proto3 does.
func healthCheckRequest(service string) []byte {
	if service == "" {
		return nil
	}
	b := []byte{1<<3 | 2}
	b = binary.AppendUvarint(b, uint64(len(service)))
	return append(b, service...)
}

// healthCheckServing decodes the framed grpc.health.v1.HealthCheckResponse and reports whether its
// status (field 1, a varint) is SERVING (1). Unknown fields are skipped, as protobuf requires.
func healthCheckServing(frame []byte) (bool, error) {
	if len(frame) < 5 || frame[0] != 0 {
		return false, errors.New("not one uncompressed gRPC message")
	}
	n := binary.BigEndian.Uint32(frame[1:5])
	msg := frame[5:]
	if uint32(len(msg)) < n {
		return false, errors.New("truncated gRPC message")
	}
	msg = msg[:n]
	status := uint64(0) // UNKNOWN, proto3's default
	for len(msg) > 0 {
		key, k := binary.Uvarint(msg)
		if k <= 0 {
			return false, errors.New("malformed HealthCheckResponse")
		}
		msg = msg[k:]
		switch key & 7 {
		case 0: // varint
			v, k := binary.Uvarint(msg)
			if k <= 0 {
				return false, errors.New("malformed HealthCheckResponse")
			}
			msg = msg[k:]
			if key>>3 == 1 {
				status = v
			}
		case 2: // length-delimited
			l, k := binary.Uvarint(msg)
			if k <= 0 || uint64(len(msg)-k) < l {
				return false, errors.New("malformed HealthCheckResponse")
			}
			msg = msg[k+int(l):]
		case 1: // 64-bit
			if len(msg) < 8 {
				return false, errors.New("malformed HealthCheckResponse")
			}
			msg = msg[8:]
		case 5: // 32-bit
			if len(msg) < 4 {
				return false, errors.New("malformed HealthCheckResponse")
			}
			msg = msg[4:]
		default:
			return false, errors.New("malformed HealthCheckResponse")
		}
	}
	return status == 1, nil
}

// AppProbes returns the app's probes the process serves (Source.AppProbes).
func (c *Config) AppProbes() map[string]appprobe.AppProbe { return c.source.AppProbes }
