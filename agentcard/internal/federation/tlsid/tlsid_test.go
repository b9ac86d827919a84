package tlsid

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/devca"
)

// TestFilesAreReadAgainWhenTheyChange: FileSource and FileBundle present what their files hold,
// the new content once a file changes, and the last good value while a rewrite is half done.
func TestFilesAreReadAgainWhenTheyChange(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, bundleFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "bundle.crt")
	td := spiffeid.RequireTrustDomainFromString("example.org")
	ca, err := devca.NewCA(td.Name(), time.Hour)
	require.NoError(t, err)
	mint := func(id string) *devca.SVID {
		s, err := ca.NewSVID(id, devca.SVIDOptions{})
		require.NoError(t, err)
		require.NoError(t, devca.WriteFiles(certFile, keyFile, s.Key, s.Chain...))
		return s
	}
	first := mint("spiffe://example.org/ns/a/sa/first")
	require.NoError(t, os.WriteFile(bundleFile, devca.CertPEM(ca.Cert), 0o644))

	src := &FileSource{CertFile: certFile, KeyFile: keyFile}
	got, err := src.GetX509SVID()
	require.NoError(t, err)
	assert.Equal(t, first.Cert.Raw, got.Certificates[0].Raw)
	again, err := src.GetX509SVID()
	require.NoError(t, err)
	assert.Same(t, got, again, "unchanged files are not read again")

	second := mint("spiffe://example.org/ns/a/sa/second-with-a-longer-name")
	got, err = src.GetX509SVID()
	require.NoError(t, err)
	assert.Equal(t, second.Cert.Raw, got.Certificates[0].Raw, "a rotated SVID is presented")

	require.NoError(t, os.WriteFile(certFile, []byte("half written"), 0o644))
	kept, err := src.GetX509SVID()
	require.NoError(t, err)
	assert.Same(t, got, kept, "a file that does not load keeps the last good SVID")

	_, err = (&FileSource{CertFile: certFile, KeyFile: keyFile}).GetX509SVID()
	assert.ErrorContains(t, err, "loading the X.509-SVID from "+certFile, "nothing good loaded yet: the error names the files")

	bundles := &FileBundle{TrustDomain: td, File: bundleFile}
	b, err := bundles.GetX509BundleForTrustDomain(td)
	require.NoError(t, err)
	assert.True(t, b.HasX509Authority(ca.Cert))
	_, err = bundles.GetX509BundleForTrustDomain(spiffeid.RequireTrustDomainFromString("other.org"))
	assert.ErrorContains(t, err, `no trust bundle for trust domain "other.org"`)
	_, err = (&FileBundle{TrustDomain: td, File: filepath.Join(dir, "missing.crt")}).GetX509BundleForTrustDomain(td)
	assert.Error(t, err)
}
