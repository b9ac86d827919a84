package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap/identity"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/register"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
	"github.com/kagenti/platform/tokenexchange/internal/registrar"
)

// Registrar registers the clients of TokenExchanges with clientAuthentication jwtSVID, as
// kagenti-tokenexchange's own SPIFFE identity (--registrar-spiffe-socket).
type Registrar struct {
	*registrar.Registrar

	mu          sync.Mutex
	trustDomain string
	// done remembers each TokenExchange's last registration until its status holds it: a status
	// write refused as stale, or lost, must not register the same client again. Keyed by name,
	// checked against the UID (a TokenExchange recreated under the name registers anew).
	done map[types.NamespacedName]remembered
}

type remembered struct {
	uid    types.UID
	client v1alpha1.RegisteredClient
}

func (r *Registrar) remembered(te *v1alpha1.TokenExchange, hash string) (v1alpha1.RegisteredClient, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.done[client.ObjectKeyFromObject(te)]
	return m.client, ok && m.uid == te.UID && m.client.MetadataHash == hash
}

func (r *Registrar) remember(te *v1alpha1.TokenExchange, c v1alpha1.RegisteredClient) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = map[types.NamespacedName]remembered{}
	}
	r.done[client.ObjectKeyFromObject(te)] = remembered{uid: te.UID, client: c}
}

// Forget drops what was remembered for a TokenExchange that is gone.
func (r *Registrar) Forget(key types.NamespacedName) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.done, key)
}

// TrustDomain is the controller's own, the default of the workloads' SPIFFE IDs: it registers
// workloads of its trust domain unless spec.spiffe.trustDomain names another.
func (r *Registrar) TrustDomain(ctx context.Context, audience string) (string, error) {
	r.mu.Lock()
	td := r.trustDomain
	r.mu.Unlock()
	if td != "" {
		return td, nil
	}
	id, err := r.Whoami(ctx, audience)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trustDomain = id.TrustDomain().Name()
	return r.trustDomain, nil
}

// registerClient registers the workload's client when te asks kagenti-tokenexchange to
// (clientAuthentication jwtSVID), records it in the status and sets ClientRegistered. It returns
// the client ID config.yaml carries ("" for none yet) and why the registration failed. A client
// registered before for other metadata keeps serving until the new one is registered.
func (r *Reconciler) registerClient(ctx context.Context, te *v1alpha1.TokenExchange, workload string, tmpl *corev1.PodTemplateSpec, s status) (string, error) {
	if !te.Spec.RegistersWithSVID() {
		s.ClientRegistration = nil
		s.Remove(v1alpha1.ConditionClientRegistered)
		return "", nil
	}
	prevID := ""
	if s.ClientRegistration != nil {
		prevID = s.ClientRegistration.ClientID
	}
	fail := func(err error) (string, error) {
		s.set(v1alpha1.ConditionClientRegistered, false, registrar.KindOf(err), err.Error())
		return prevID, err
	}
	if r.Registrar == nil {
		return fail(&registrar.Error{Kind: registrar.NoSVID, Err: errors.New("kagenti-tokenexchange runs without --registrar-spiffe-socket: it has no SPIFFE identity to register clients with (clientAuthentication jwtSVID); start it with the SPIRE agent's socket (helm tokenexchange.registrar.enabled) or use clientAuthentication clientSecret")})
	}
	cr := te.Spec.ClientRegistration
	if cr.OIDC == nil || cr.OIDC.Issuer == "" || cr.OIDC.RegistrationURL == "" {
		return fail(&registrar.Error{Kind: registrar.Refused, Err: errors.New("clientRegistration.clientAuthentication jwtSVID needs clientRegistration.oidc.issuer and registrationUrl in the TokenExchange")})
	}
	td := ""
	if te.Spec.Spiffe != nil {
		td = te.Spec.Spiffe.TrustDomain
	}
	if td == "" {
		var err error
		if td, err = r.Registrar.TrustDomain(ctx, cr.OIDC.Issuer); err != nil {
			return fail(err)
		}
	}
	w := authconfig.Workload{Namespace: te.Namespace, Name: workload, ServiceAccount: tmpl.Spec.ServiceAccountName}
	name, err := authconfig.RenderClientName(identity.ClientNameTemplate, w)
	if err != nil {
		return fail(&registrar.Error{Kind: registrar.Refused, Err: err})
	}
	tokenExchange := te.Spec.Outbound == nil || te.Spec.Outbound.TokenExchange == nil || te.Spec.Outbound.TokenExchange.Enabled == nil || *te.Spec.Outbound.TokenExchange.Enabled
	c := registrar.Client{RegistrationURL: cr.OIDC.RegistrationURL, Issuer: cr.OIDC.Issuer, Name: name,
		Owner: register.OwnerOf(w), SpiffeID: w.SpiffeID(td), TokenExchange: tokenExchange}
	hash := c.Hash()
	if prev := s.ClientRegistration; prev != nil && prev.ClientID != "" && prev.MetadataHash == hash {
		s.set(v1alpha1.ConditionClientRegistered, true, v1alpha1.ReasonRegistered, registeredMessage(prev))
		return prev.ClientID, nil
	}
	if done, ok := r.Registrar.remembered(te, hash); ok {
		s.ClientRegistration = &done
		s.set(v1alpha1.ConditionClientRegistered, true, v1alpha1.ReasonRegistered, registeredMessage(&done))
		return done.ClientID, nil
	}
	reg, err := r.Registrar.Register(ctx, c)
	if err != nil {
		r.Recorder.Eventf(te, nil, corev1.EventTypeWarning, registrar.KindOf(err), "Register", "%s", truncate(err.Error()))
		return fail(err)
	}
	now := metav1.Now()
	done := v1alpha1.RegisteredClient{ClientID: reg.ClientID, ClientName: c.Name, SpiffeID: c.SpiffeID,
		RegistrationURL: c.RegistrationURL, Registrar: reg.Registrar, MetadataHash: hash, RegisteredAt: &now}
	r.Registrar.remember(te, done)
	s.ClientRegistration = &done
	s.set(v1alpha1.ConditionClientRegistered, true, v1alpha1.ReasonRegistered, registeredMessage(&done))
	r.Recorder.Eventf(te, nil, corev1.EventTypeNormal, v1alpha1.ReasonRegistered, "Register", "%s", registeredMessage(&done))
	return reg.ClientID, nil
}

func registeredMessage(c *v1alpha1.RegisteredClient) string {
	return fmt.Sprintf("client %s (%s) registered at %s by %s, bound to %s: it authenticates only with that JWT SVID, no client secret exists",
		c.ClientID, c.ClientName, c.RegistrationURL, c.Registrar, c.SpiffeID)
}
