package extauthz

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
)

// serveTLS starts an OK-answering authorizer with a self-signed certificate for 127.0.0.1 and
// returns its address and a pool trusting it.
func serveTLS(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "authorizer"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})))
	authv3.RegisterAuthorizationServer(s, &fakeServer{answer: answer(codes.OK, ""), got: make(chan *authv3.CheckRequest, 1)})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), pool
}

func TestTLSAuthorizerIsAskedOverTLS(t *testing.T) {
	addr, pool := serveTLS(t)
	c := newClient(t, Config{Address: addr, TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	d, err := c.Authorize(context.Background(), request())
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

func TestUntrustedTLSAuthorizerGivesNoDecision(t *testing.T) {
	addr, _ := serveTLS(t)
	c := newClient(t, Config{Address: addr, TLS: &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}})
	d, err := c.Authorize(context.Background(), request())
	require.Error(t, err)
	assert.False(t, d.Allowed)
	assert.Contains(t, d.Reason, "external authorizer "+addr)
}

func TestRemoteAuthorizerIsAllowedWithTLS(t *testing.T) {
	c, err := New(Config{Address: "dns:///opa.policy.svc:9191", TLS: &tls.Config{MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
