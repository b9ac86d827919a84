package discovery

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

const (
	// caPublishInterval is how often the CA file is compared with what was published.
	caPublishInterval = 30 * time.Second
	// caConfigMapKey holds the PEM CA in the published ConfigMap.
	caConfigMapKey = "ca.crt"
	fieldOwner     = "kagenti-agentcard"
)

// caPublisher copies the CA of the discovery API's certificate (ca.crt of the certificate
// directory) into a ConfigMap whenever it changes, so clients can verify the server without
// reading the certificate Secret, which also holds the CA's private key. The shipped manifests let
// every authenticated user read that one ConfigMap.
type caPublisher struct {
	client    client.Client
	key       types.NamespacedName
	caFile    string
	certReady <-chan struct{}
	interval  time.Duration
}

// NeedLeaderElection: one writer is enough; every replica mounts the same certificate.
func (p *caPublisher) NeedLeaderElection() bool { return true }

func (p *caPublisher) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("discovery-ca").WithValues("configMap", p.key.String())
	select {
	case <-p.certReady:
	case <-ctx.Done():
		return nil
	}
	var published []byte
	warned := false
	for {
		pem, err := p.read()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !warned {
				logger.Info("the certificate directory has no ca.crt: clients must get the CA elsewhere", "file", p.caFile)
				warned = true
			}
		case err != nil:
			logger.Error(err, "cannot read the discovery API's CA", "file", p.caFile)
		case !bytes.Equal(pem, published):
			if err := p.apply(ctx, pem); err != nil {
				logger.Error(err, "cannot publish the discovery API's CA; retrying")
			} else {
				published = pem
				logger.Info("published the discovery API's CA")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.interval):
		}
	}
}

// read returns the CA file when it holds at least one PEM certificate.
func (p *caPublisher) read() ([]byte, error) {
	pem, err := os.ReadFile(p.caFile)
	if err != nil {
		return nil, err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", p.caFile)
	}
	return pem, nil
}

func (p *caPublisher) apply(ctx context.Context, pem []byte) error {
	cm := corev1ac.ConfigMap(p.key.Name, p.key.Namespace).
		WithLabels(map[string]string{"app.kubernetes.io/name": "kagenti-agentcard", contract.ManagedByLabel: fieldOwner}).
		WithData(map[string]string{caConfigMapKey: string(pem)})
	return p.client.Apply(ctx, cm, client.FieldOwner(fieldOwner), client.ForceOwnership)
}
