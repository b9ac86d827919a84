package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/injector/internal/certs"
)

func TestGenerateVerifies(t *testing.T) {
	b, err := certs.Generate([]string{"127.0.0.1", "kagenti-injector.kagenti-system.svc"}, time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, b.Write(dir))
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certs.CertFile), filepath.Join(dir, certs.KeyFile))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, certs.CAFile))
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	for _, host := range []string{"127.0.0.1", "kagenti-injector.kagenti-system.svc"} {
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host})
		require.NoError(t, err, host)
	}
	_, err = certs.Generate(nil, time.Hour)
	require.Error(t, err)
}
