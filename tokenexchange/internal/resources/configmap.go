// Package resources renders the objects the tokenexchange controller writes. Its functions are
// pure: no client, no clock, same input → byte-identical output.
package resources

import (
	"bytes"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Keys, annotations and labels of the ConfigMap, whose one key the injector projects into the
// identity volume, contract.PathIdentity (/etc/kagenti/identity/; contract.PathTokenExchange in
// pods of injections v1 to v3).
const (
	ConfigKey  = authconfig.ConfigFile
	TargetAnno = "kagenti.io/target"
	// Component is the ConfigMap's contract.ComponentLabel value.
	Component = contract.ComponentTokenExchange
)

// Target is the workload the ConfigMap is for.
type Target struct {
	Kind      string
	Name      string
	Namespace string
	// ClientID is the client the controller registered for the workload (clientAuthentication
	// jwtSVID), "" for none (yet).
	ClientID string
}

// ConfigMapName is the name of the ConfigMap for workload, shared with the injector.
func ConfigMapName(workload string) string { return configmap.TokenExchangeName(workload) }

// MakeConfigMap renders the ConfigMap {workload}-token-exchange for te and its workload t. Its
// one key, config.yaml, holds what te's spec sets and nothing else: the identity sidecars merge it
// over the defaults the injector gave them (authconfig.Resolve), so the defaults live in one
// place. The owner reference, managed-by label and content hash are added by kit.Applier.
func MakeConfigMap(te *v1alpha1.TokenExchange, t Target) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        ConfigMapName(t.Name),
			Namespace:   t.Namespace,
			Labels:      map[string]string{contract.PartOfLabel: contract.PartOf, contract.ComponentLabel: Component},
			Annotations: map[string]string{TargetAnno: t.Kind + "/" + t.Name},
		},
		Data: map[string]string{
			ConfigKey: fmt.Sprintf("# Rendered by kagenti-tokenexchange from TokenExchange %s/%s: what it sets over the injector's defaults. Do not edit: changes are overwritten.\n",
				te.Namespace, te.Name) + string(authconfig.Marshal(withRegistration(Overrides(te), te, t.ClientID))),
		},
	}
}

// withRegistration adds what the controller's registration gives the data plane
// (clientAuthentication jwtSVID): the registered client's ID and, unless the spec sets one, the
// provider's issuer as the JWT SVID's audience, since the SVID is the client assertion and RFC
// 7523 §3 wants the authorization server among its audiences.
func withRegistration(s authconfig.Spec, te *v1alpha1.TokenExchange, clientID string) authconfig.Spec {
	if !te.Spec.RegistersWithSVID() {
		return s
	}
	s.ClientRegistration.ClientID = clientID
	if s.Spiffe == nil {
		s.Spiffe = &authconfig.SpiffeSpec{}
	}
	if s.Spiffe.Audience == "" && s.ClientRegistration.OIDC != nil {
		s.Spiffe.Audience = s.ClientRegistration.OIDC.Issuer
	}
	return s
}

// Overrides is te's spec in the data plane's schema. The two share their JSON shape (targetRef
// aside); the conversion decodes strictly, and a test converts a spec with every field set, so a
// field added to the API and not to the schema fails the build's tests rather than vanishing.
func Overrides(te *v1alpha1.TokenExchange) authconfig.Spec {
	s := te.Spec
	b, err := json.Marshal(struct {
		Spiffe             *v1alpha1.SpiffeSpec             `json:"spiffe,omitempty"`
		ClientRegistration *v1alpha1.ClientRegistrationSpec `json:"clientRegistration,omitempty"`
		Inbound            *v1alpha1.InboundSpec            `json:"inbound,omitempty"`
		Outbound           *v1alpha1.OutboundSpec           `json:"outbound,omitempty"`
		MTLS               *v1alpha1.MTLSSpec               `json:"mtls,omitempty"`
	}{s.Spiffe, s.ClientRegistration, s.Inbound, s.Outbound, s.MTLS})
	if err != nil {
		panic(fmt.Sprintf("marshalling TokenExchange spec: %v", err)) // plain structs: cannot fail
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var out authconfig.Spec
	if err := dec.Decode(&out); err != nil {
		panic(fmt.Sprintf("TokenExchange spec does not fit the data plane's schema (authconfig.Spec): %v", err))
	}
	return out
}
