// Package certfiles writes a webhook's serving certificate from its Secret into the directory the
// webhook server reads, and keeps it current.
//
// cert-controller's rotator writes the certificate into a Secret and waits for its files to appear
// in the server's certificate directory. With that directory a Secret volume, they appear when the
// kubelet next syncs the volume (up to a minute or more), and the rotator polls for them with a
// doubling backoff: on a real kubelet the webhook served 94–110 s after the pod started (issue 27).
// A Syncer watches the one Secret and writes its files into an emptyDir as soon as the API server
// has them, so the webhook serves within a second or two of the certificate existing, and a rotated
// certificate reaches the server without waiting on the kubelet either.
package certfiles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServingKeys are the keys of cert-controller's Secret that a webhook server reads. The CA's private
// key (ca.key) stays in the Secret: nothing in the pod needs it on disk.
var ServingKeys = []string{"tls.crt", "tls.key"}

// Syncer writes Keys of the Secret Namespace/Name into Dir whenever they change. Its zero Keys means
// ServingKeys. It runs on every replica (each serves the webhook).
type Syncer struct {
	Config          *rest.Config
	Namespace, Name string
	Dir             string
	Keys            []string
	Log             logr.Logger
}

// NeedLeaderElection: every replica writes its own files.
func (s *Syncer) NeedLeaderElection() bool { return false }

// Start watches the Secret (a cache of that one object) and writes its files until ctx ends.
func (s *Syncer) Start(ctx context.Context) error {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := cache.New(s.Config, cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{s.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", s.Name)},
		},
	})
	if err != nil {
		return fmt.Errorf("certificate files: a cache of Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return err
	}
	write := func(obj any) {
		sec, ok := obj.(*corev1.Secret)
		if !ok || sec.Name != s.Name {
			return
		}
		switch wrote, err := s.Write(sec.Data); {
		case err != nil:
			s.Log.Error(err, "writing the certificate files", "secret", s.Namespace+"/"+s.Name, "dir", s.Dir)
		case wrote:
			s.Log.Info("certificate files written from the Secret", "secret", s.Namespace+"/"+s.Name, "dir", s.Dir)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	}); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Write writes each key present in data into Dir, replacing a file atomically and only when its
// content changed; it reports whether it wrote anything. A Secret without every key (the rotator
// has not filled it yet) writes nothing.
func (s *Syncer) Write(data map[string][]byte) (bool, error) {
	keys := s.Keys
	if len(keys) == 0 {
		keys = ServingKeys
	}
	for _, k := range keys {
		if len(data[k]) == 0 {
			return false, nil
		}
	}
	wrote := false
	var errs []error
	for _, k := range keys {
		path := filepath.Join(s.Dir, k)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data[k]) {
			continue
		}
		if err := writeAtomic(path, data[k]); err != nil {
			errs = append(errs, err)
			continue
		}
		wrote = true
	}
	return wrote, errors.Join(errs...)
}

// writeAtomic: a reader sees the old file or the new one, never a part.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
