// Package discovery serves the AgentCard discovery API from the controller's cache:
//
//	GET /v1/agents?namespace=&skill=&tag=&name=&verified=&limit=&continue=
//	GET /v1/agents/{namespace}/{name}
//
// Callers authenticate with a Kubernetes bearer token (TokenReview) and need list (collection) or
// get (one agent) on agentcards.kagenti.io in the namespace (SubjectAccessReview).
package discovery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// Options configure the discovery API.
type Options struct {
	BindAddress       string
	AllowAnonymous    bool
	CertFile, KeyFile string
}

// Setup adds the discovery API server to mgr (on every replica: it only reads the cache).
func Setup(mgr ctrl.Manager, o Options) error {
	if o.BindAddress == "" || o.BindAddress == "0" {
		return nil
	}
	var authz Authorizer
	if !o.AllowAnonymous {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		authz = &KubeAuthorizer{Client: cs}
	}
	return mgr.Add(&runnable{opts: o, handler: &Server{Reader: mgr.GetClient(), Authorizer: authz}})
}

type runnable struct {
	opts    Options
	handler http.Handler
}

func (r *runnable) NeedLeaderElection() bool { return false }

func (r *runnable) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", r.opts.BindAddress)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r.handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.FromContext(ctx).Info("discovery API listening", "address", ln.Addr().String(), "anonymous", r.opts.AllowAnonymous)
	if r.opts.CertFile != "" {
		err = srv.ServeTLS(ln, r.opts.CertFile, r.opts.KeyFile)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Server is the HTTP handler. A nil Authorizer serves anonymously.
type Server struct {
	Reader     client.Reader
	Authorizer Authorizer
}

// Agent is one entry of the API.
type Agent struct {
	Namespace   string          `json:"namespace"`
	Name        string          `json:"name"`
	AgentName   string          `json:"agentName,omitempty"`
	Version     string          `json:"version,omitempty"`
	Description string          `json:"description,omitempty"`
	Skills      []Skill         `json:"skills,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Ready       bool            `json:"ready"`
	Verified    bool            `json:"verified"`
	Bound       bool            `json:"bound"`
	SpiffeID    string          `json:"spiffeID,omitempty"`
	Pods        int32           `json:"pods"`
	CardHash    string          `json:"cardHash,omitempty"`
	Card        json.RawMessage `json:"card,omitempty"`
}

// Skill is a card skill.
type Skill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// AgentList is a page of agents.
type AgentList struct {
	Items    []Agent `json:"items"`
	Continue string  `json:"continue,omitempty"`
}

const (
	defaultLimit = 100
	maxLimit     = 1000
)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "only GET is supported")
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/v1/agents":
		s.list(w, r)
	case strings.HasPrefix(path, "/v1/agents/"):
		parts := strings.Split(strings.TrimPrefix(path, "/v1/agents/"), "/")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			writeError(w, http.StatusNotFound, "use /v1/agents/{namespace}/{name}")
			return
		}
		s.get(w, r, parts[0], parts[1])
	case path == "/healthz":
		w.WriteHeader(http.StatusOK)
	default:
		writeError(w, http.StatusNotFound, "not found; use /v1/agents")
	}
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request, a Access) bool {
	if s.Authorizer == nil {
		return true
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kagenti-agentcard"`)
		writeError(w, http.StatusUnauthorized, "a Kubernetes bearer token is required (Authorization: Bearer <token>)")
		return false
	}
	user, allowed, err := s.Authorizer.Authorize(r.Context(), token, a)
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "cannot check authorization: "+err.Error())
		return false
	case user == "":
		writeError(w, http.StatusUnauthorized, "the token is not valid")
		return false
	case !allowed:
		scope := "in namespace " + strconv.Quote(a.Namespace)
		if a.Namespace == "" {
			scope = "cluster-wide (pass ?namespace= to list one namespace)"
		}
		writeError(w, http.StatusForbidden, "user "+strconv.Quote(user)+" cannot "+a.Verb+" agentcards.kagenti.io "+scope)
		return false
	}
	return true
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns := q.Get("namespace")
	if !s.authorize(w, r, Access{Verb: "list", Namespace: ns}) {
		return
	}
	limit := defaultLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit must be a positive integer")
			return
		}
		limit = min(n, maxLimit)
	}
	after := ""
	if c := q.Get("continue"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid continue token")
			return
		}
		after = string(b)
	}
	var verified *bool
	if v := q.Get("verified"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "verified must be true or false")
			return
		}
		verified = &b
	}
	var cards v1alpha1.AgentCardList
	opts := []client.ListOption{}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := s.Reader.List(r.Context(), &cards, opts...); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	sort.Slice(cards.Items, func(i, j int) bool { return key(&cards.Items[i]) < key(&cards.Items[j]) })
	out := AgentList{Items: []Agent{}}
	for i := range cards.Items {
		c := &cards.Items[i]
		if after != "" && key(c) <= after {
			continue
		}
		a := toAgent(c, false)
		if !matches(a, q.Get("name"), q.Get("skill"), q.Get("tag"), verified) {
			continue
		}
		if len(out.Items) == limit {
			out.Continue = base64.RawURLEncoding.EncodeToString([]byte(key(&cards.Items[i-1])))
			break
		}
		out.Items = append(out.Items, a)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, ns, name string) {
	if !s.authorize(w, r, Access{Verb: "get", Namespace: ns, Name: name}) {
		return
	}
	var c v1alpha1.AgentCard
	if err := s.Reader.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
		if client.IgnoreNotFound(err) == nil {
			writeError(w, http.StatusNotFound, "AgentCard "+ns+"/"+name+" not found")
			return
		}
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, toAgent(&c, true))
}

func key(c *v1alpha1.AgentCard) string { return c.Namespace + "/" + c.Name }

func toAgent(c *v1alpha1.AgentCard, withCard bool) Agent {
	a := Agent{Namespace: c.Namespace, Name: c.Name, Pods: c.Status.DiscoveredPods, CardHash: c.Status.CardHash}
	a.Ready = meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)
	if sig := c.Status.Signature; sig != nil {
		a.Verified, a.SpiffeID = sig.Verified, sig.SpiffeID
	}
	if b := c.Status.Binding; b != nil {
		a.Bound = b.Bound
	}
	tags := map[string]bool{}
	if c.Status.Card != nil && len(c.Status.Card.Raw) > 0 {
		var body struct {
			Name        string  `json:"name"`
			Version     string  `json:"version"`
			Description string  `json:"description"`
			Skills      []Skill `json:"skills"`
		}
		if json.Unmarshal(c.Status.Card.Raw, &body) == nil {
			a.AgentName, a.Version, a.Description, a.Skills = body.Name, body.Version, body.Description, body.Skills
			for _, s := range body.Skills {
				for _, t := range s.Tags {
					tags[t] = true
				}
			}
		}
		if withCard {
			a.Card = c.Status.Card.Raw
		}
	}
	if m := c.Spec.Metadata; m != nil {
		if m.Name != "" {
			a.AgentName = m.Name
		}
		if m.Description != "" {
			a.Description = m.Description
		}
		for _, t := range m.Tags {
			tags[t] = true
		}
	}
	for t := range tags {
		a.Tags = append(a.Tags, t)
	}
	sort.Strings(a.Tags)
	return a
}

func matches(a Agent, name, skill, tag string, verified *bool) bool {
	if name != "" && !strings.EqualFold(a.AgentName, name) && a.Name != name {
		return false
	}
	if verified != nil && (a.Verified && a.Bound) != *verified {
		return false
	}
	if tag != "" && !contains(a.Tags, tag) {
		return false
	}
	if skill != "" {
		found := false
		for _, s := range a.Skills {
			if s.ID == skill || strings.EqualFold(s.Name, skill) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
