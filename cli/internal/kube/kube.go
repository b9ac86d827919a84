// Package kube holds the clients every command uses and the few generic readers they share:
// objects by GroupVersionKind through the RESTMapper, and conditions read by type from any object.
package kube

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Clients are the API clients of one cluster.
type Clients struct {
	Config    *rest.Config
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	Mapper    meta.RESTMapper
}

// Getter is what kubectl's ConfigFlags (k8s.io/cli-runtime) provide.
type Getter interface {
	ToRESTConfig() (*rest.Config, error)
	ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error)
	ToRESTMapper() (meta.RESTMapper, error)
}

// New builds the clients from kubectl's flags.
func New(g Getter) (*Clients, error) {
	cfg, err := g.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return NewForConfig(cfg, g)
}

// NewForConfig builds the clients for cfg; with g nil, discovery and the RESTMapper are built from cfg.
func NewForConfig(cfg *rest.Config, g Getter) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &Clients{Config: cfg, Kube: kc, Dynamic: dc, Discovery: kc.Discovery()}
	if g != nil {
		m, err := g.ToRESTMapper()
		if err != nil {
			return nil, err
		}
		c.Mapper = m
		return c, nil
	}
	c.Mapper = newMapper(kc.Discovery())
	return c, nil
}

// Resource returns the client for objects of gvk in namespace (ignored for cluster-scoped kinds).
func (c *Clients) Resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, *meta.RESTMapping, error) {
	mapping, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.Dynamic.Resource(mapping.Resource).Namespace(namespace), mapping, nil
	}
	return c.Dynamic.Resource(mapping.Resource), mapping, nil
}

// Get reads one object; a kind the cluster does not serve is a NoKindMatch error.
func (c *Clients) Get(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	ri, _, err := c.Resource(gvk, namespace)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, name, metav1.GetOptions{})
}

// List lists objects of gvk in namespace ("" for all namespaces).
func (c *Clients) List(ctx context.Context, gvk schema.GroupVersionKind, namespace string, opts metav1.ListOptions) ([]unstructured.Unstructured, error) {
	ri, _, err := c.Resource(gvk, namespace)
	if err != nil {
		return nil, err
	}
	var out []unstructured.Unstructured
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, list.Items...)
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// Served reports whether the cluster serves gvk (its CRD is installed and the version served).
func (c *Clients) Served(gvk schema.GroupVersionKind) bool {
	_, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil
}

// ResetMapper forgets cached discovery, after CRDs were installed or removed.
func (c *Clients) ResetMapper() {
	if r, ok := c.Mapper.(meta.ResettableRESTMapper); ok {
		r.Reset()
	}
}
