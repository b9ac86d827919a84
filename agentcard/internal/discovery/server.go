// Package discovery serves the AgentCard discovery API from the controller's cache, over TLS:
//
//	GET /v1/agents?namespace=&skill=&tag=&name=&verified=&callable=&access=&limit=&continue=
//	GET /v1/agents/{namespace}/{name}?access=
//	GET /v1/graph?namespace=&name=
//
// Callers authenticate with a Kubernetes bearer token (TokenReview, optionally bound to an
// audience) and need list (collection) or get (one agent) on agentcards.kagenti.io in the namespace
// (SubjectAccessReview); the graph needs get on agentcards/graph. Review answers are cached briefly and every client address is rate limited.
package discovery

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/pkg/configmap/authz"
)

// Server is the HTTP handler. A nil Authorizer serves anonymously; a nil Limiter does not limit.
type Server struct {
	Reader client.Reader
	// Remote, on a federation hub, adds the member clusters' cards; every entry then carries its
	// cluster (LocalCluster for this cluster's own) and ?cluster= filters by it.
	Remote       RemoteCatalog
	LocalCluster string
	Authorizer   Authorizer
	// Limiter answers 429 to a client over its rate before any other work (in particular before
	// a TokenReview) is done.
	Limiter *ClientLimiter
	// Calls reads the calls each pod's authbridge counted, for GET /v1/graph (nil: not served).
	Calls CallCounter
	// Leader, on a hub, answers for a follower what only the leader holds (LeaderForwarder);
	// nil: a follower answers 503.
	Leader http.Handler
	// Replicas, on a hub, recognises a request another replica forwarded: the rate limit then
	// counts it against the client it names (ForwardedForHeader). Nil: the header is ignored.
	Replicas *ReplicaVerifier
	// Policies gives the agents' authorization policies, for ?access= and ?callable= (nil: every
	// answer is unknown); TrustDomain is the one of the requesters' SPIFFE IDs.
	Policies    PolicySource
	TrustDomain string
}

// Agent is one entry of the API.
type Agent struct {
	// Cluster is where the agent runs: set on a federation hub only.
	Cluster     string   `json:"cluster,omitempty"`
	Namespace   string   `json:"namespace"`
	Name        string   `json:"name"`
	AgentName   string   `json:"agentName,omitempty"`
	Version     string   `json:"version,omitempty"`
	Description string   `json:"description,omitempty"`
	Skills      []Skill  `json:"skills,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	Ready       bool     `json:"ready"`
	Verified    bool     `json:"verified"`
	Bound       bool     `json:"bound"`
	SpiffeID    string   `json:"spiffeID,omitempty"`
	Pods        int32    `json:"pods"`
	CardHash    string   `json:"cardHash,omitempty"`
	// Truncated says skills or tags were left out to keep the summary within MaxSummaryBytes;
	// GET /v1/agents/{namespace}/{name} returns the whole card.
	Truncated bool            `json:"truncated,omitempty"`
	Card      json.RawMessage `json:"card,omitempty"`
	// Freshness of a federated card (another cluster's).
	Freshness *Freshness `json:"freshness,omitempty"`
	// Access says whether the requester may call the agent, under the agent's authorization
	// policy (?access=true, ?callable=true).
	Access *authz.Access `json:"access,omitempty"`

	// workload is the AgentCard's target workload ("" in selector mode and for a federated card).
	workload string
}

// MaxSummaryBytes bounds the JSON of one agent's summary, so that a page of a list is bounded
// whatever the cards hold: text copied from a card is cut (card.MaxNameBytes,
// card.MaxDescriptionBytes) and the skills and tags that do not fit are left out.
const MaxSummaryBytes = 16 << 10

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

func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &statusRecorder{ResponseWriter: rw, code: http.StatusOK}
	defer func() { observeRequest(w.code) }()
	if s.Limiter != nil && r.URL.Path != "/healthz" {
		client := s.rateLimitKey(r)
		if ok, wait := s.Limiter.Allow(client); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
			writeError(w, http.StatusTooManyRequests, "too many requests from "+client+"; retry after the Retry-After seconds")
			return
		}
	}
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
	case path == "/v1/graph":
		s.graph(w, r)
	case path == "/healthz":
		w.WriteHeader(http.StatusOK)
	default:
		writeError(w, http.StatusNotFound, "not found; use /v1/agents or /v1/graph")
	}
}

// authorize answers 401, 403 or 503 and returns false unless the request's bearer may do a;
// it returns the bearer's user name ("" when the API serves anonymously).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, a Access) (string, bool) {
	if s.Authorizer == nil {
		return "", true
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kagenti-agentcard"`)
		writeError(w, http.StatusUnauthorized, "a Kubernetes bearer token is required (Authorization: Bearer <token>)")
		return "", false
	}
	user, allowed, err := s.Authorizer.Authorize(r.Context(), token, a)
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "cannot check authorization: "+err.Error())
		return "", false
	case user == "":
		writeError(w, http.StatusUnauthorized, "the token is not valid")
		return "", false
	case !allowed:
		scope := "in namespace " + strconv.Quote(a.Namespace)
		if a.Namespace == "" {
			scope = "cluster-wide (pass ?namespace= to list one namespace)"
		}
		resource := "agentcards"
		if a.Subresource != "" {
			resource += "/" + a.Subresource
		}
		writeError(w, http.StatusForbidden, "user "+strconv.Quote(user)+" cannot "+a.Verb+" "+resource+".kagenti.io "+scope)
		return "", false
	}
	return user, true
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns := q.Get("namespace")
	user, ok := s.authorize(w, r, Access{Verb: "list", Namespace: ns})
	if !ok {
		return
	}
	callable, err := boolParam(q.Get("callable"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "callable "+err.Error())
		return
	}
	withAccess, err := boolParam(q.Get("access"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "access "+err.Error())
		return
	}
	var asker *requester
	if callable || withAccess {
		if asker, ok = s.requester(w, user); !ok {
			return
		}
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
	cluster := q.Get("cluster")
	if s.Remote != nil && cluster != s.LocalCluster && !s.Remote.Serving() {
		if s.forwardToLeader(w, r) {
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "this replica is not the federation hub's leader and holds no member cluster's agents; retry (or pass ?cluster="+s.LocalCluster+")")
		return
	}
	agents, err := s.agents(r, ns, cluster)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := AgentList{Items: []Agent{}}
	for i := range agents {
		a := agents[i]
		if after != "" && s.key(a) <= after {
			continue
		}
		if !matches(a, q.Get("name"), q.Get("skill"), q.Get("tag"), verified) {
			continue
		}
		if asker != nil {
			a.Access = s.access(a, asker)
			if callable && a.Access.Result != authz.AccessAllow && a.Access.Result != authz.AccessConditional {
				continue
			}
		}
		if len(out.Items) == limit {
			out.Continue = base64.RawURLEncoding.EncodeToString([]byte(s.key(agents[i-1])))
			break
		}
		out.Items = append(out.Items, bounded(a))
	}
	writeJSON(w, http.StatusOK, out)
}

// forwardToLeader hands a request only the hub's leader can answer to it, unless it has been
// forwarded once already (two replicas that each believe the other leads must not loop).
func (s *Server) forwardToLeader(w http.ResponseWriter, r *http.Request) bool {
	if s.Leader == nil || r.Header.Get(ForwardedHeader) != "" {
		return false
	}
	s.Leader.ServeHTTP(w, r)
	return true
}

// agents lists this cluster's agents and, on a hub, the member clusters', sorted by key.
func (s *Server) agents(r *http.Request, ns, cluster string) ([]Agent, error) {
	var agents []Agent
	if cluster == "" || cluster == s.LocalCluster || s.Remote == nil {
		var cards v1alpha1.AgentCardList
		opts := []client.ListOption{}
		if ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := s.Reader.List(r.Context(), &cards, opts...); err != nil {
			return nil, err
		}
		agents = make([]Agent, 0, len(cards.Items))
		for i := range cards.Items {
			a := toAgent(&cards.Items[i], false)
			if s.Remote != nil {
				a.Cluster = s.LocalCluster
			}
			agents = append(agents, a)
		}
	}
	if s.Remote != nil && cluster != s.LocalCluster {
		for _, rc := range s.Remote.RemoteCards(cluster, ns) {
			agents = append(agents, remoteAgent(rc, false))
		}
	}
	sort.Slice(agents, func(i, j int) bool { return s.key(agents[i]) < s.key(agents[j]) })
	return agents, nil
}

// key orders agents and continues pages: namespace/name, prefixed by the cluster on a hub.
func (s *Server) key(a Agent) string {
	if s.Remote == nil {
		return a.Namespace + "/" + a.Name
	}
	return a.Cluster + "/" + a.Namespace + "/" + a.Name
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, ns, name string) {
	user, ok := s.authorize(w, r, Access{Verb: "get", Namespace: ns, Name: name})
	if !ok {
		return
	}
	withAccess, err := boolParam(r.URL.Query().Get("access"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "access "+err.Error())
		return
	}
	var asker *requester
	if withAccess {
		if asker, ok = s.requester(w, user); !ok {
			return
		}
	}
	if cluster := r.URL.Query().Get("cluster"); s.Remote != nil && cluster != "" && cluster != s.LocalCluster {
		if !s.Remote.Serving() {
			if s.forwardToLeader(w, r) {
				return
			}
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "this replica is not the federation hub's leader; retry")
			return
		}
		rc, ok := s.Remote.RemoteCard(cluster, ns, name)
		if !ok {
			writeError(w, http.StatusNotFound, "agent "+ns+"/"+name+" of cluster "+strconv.Quote(cluster)+" not found")
			return
		}
		a := remoteAgent(rc, true)
		if asker != nil {
			a.Access = s.access(a, asker)
		}
		writeJSON(w, http.StatusOK, a)
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
	a := toAgent(&c, true)
	if s.Remote != nil {
		a.Cluster = s.LocalCluster
	}
	if asker != nil {
		a.Access = s.access(a, asker)
	}
	writeJSON(w, http.StatusOK, a)
}

func toAgent(c *v1alpha1.AgentCard, withCard bool) Agent {
	a := Agent{Namespace: c.Namespace, Name: c.Name, Pods: c.Status.DiscoveredPods, CardHash: c.Status.CardHash}
	a.Ready = meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)
	if ref := c.Spec.TargetRef; ref != nil {
		a.workload = ref.Name
	}
	if sig := c.Status.Signature; sig != nil {
		a.Verified, a.SpiffeID = sig.Verified, sig.SpiffeID
	}
	if b := c.Status.Binding; b != nil {
		a.Bound = b.Bound
	}
	tags := map[string]bool{}
	if c.Status.Card != nil && len(c.Status.Card.Raw) > 0 {
		fillFromCard(&a, c.Status.Card.Raw, tags)
		if withCard {
			a.Card = c.Status.Card.Raw
		}
	}
	if m := c.Spec.Metadata; m != nil { // bounded by the CRD schema
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

// fillFromCard copies the summary fields out of a card's JSON, cut to bounded sizes, and collects
// the skills' tags into tags.
func fillFromCard(a *Agent, raw []byte, tags map[string]bool) {
	var body struct {
		Name        string  `json:"name"`
		Version     string  `json:"version"`
		Description string  `json:"description"`
		Skills      []Skill `json:"skills"`
	}
	if json.Unmarshal(raw, &body) == nil {
		a.AgentName = card.Truncate(body.Name, card.MaxNameBytes)
		a.Version = card.Truncate(body.Version, card.MaxNameBytes)
		a.Description = card.Truncate(body.Description, card.MaxDescriptionBytes)
		for _, s := range body.Skills {
			s.ID, s.Name = card.Truncate(s.ID, card.MaxNameBytes), card.Truncate(s.Name, card.MaxNameBytes)
			s.Description = card.Truncate(s.Description, card.MaxDescriptionBytes)
			for i, t := range s.Tags {
				s.Tags[i] = card.Truncate(t, card.MaxNameBytes)
				tags[s.Tags[i]] = true
			}
			a.Skills = append(a.Skills, s)
		}
	}
}

// bounded returns a with as many skills and then tags as fit in MaxSummaryBytes.
func bounded(a Agent) Agent {
	if jsonSize(a) <= MaxSummaryBytes {
		return a
	}
	skills, tags := a.Skills, a.Tags
	a.Skills, a.Tags, a.Truncated = nil, nil, true
	budget := MaxSummaryBytes - jsonSize(a) - len(`,"skills":[],"tags":[]`)
	for _, s := range skills {
		if budget -= jsonSize(s) + 1; budget < 0 {
			return a
		}
		a.Skills = append(a.Skills, s)
	}
	for _, t := range tags {
		if budget -= jsonSize(t) + 1; budget < 0 {
			return a
		}
		a.Tags = append(a.Tags, t)
	}
	return a
}

func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

func matches(a Agent, name, skill, tag string, verified *bool) bool {
	if name != "" && !strings.EqualFold(a.AgentName, name) && a.Name != name {
		return false
	}
	if verified != nil && (a.Verified && a.Bound) != *verified {
		return false
	}
	if tag != "" && !slices.Contains(a.Tags, tag) {
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

// statusRecorder remembers the status code written, for the request metric.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// requester is who asks ?access= or ?callable=: the SPIFFE ID its pods get, or why it has none.
type requester struct {
	spiffeID string
	err      error
}

// requester maps the authenticated user to its workload identity; it answers 400 when the API
// serves anonymously (no one to answer for).
func (s *Server) requester(w http.ResponseWriter, user string) (*requester, bool) {
	if s.Authorizer == nil {
		writeError(w, http.StatusBadRequest, "access and callable answer for the requester's identity, and this API serves anonymously (--allow-anonymous)")
		return nil, false
	}
	if s.Policies == nil {
		writeError(w, http.StatusBadRequest, "access and callable need the agents' policies, which this API does not read: start kagenti-agentcard with --discovery-policies (helm agentcard.discovery.policies=true, kustomize component agentcard-discovery-policies)")
		return nil, false
	}
	id, err := spiffeIDOf(user, s.TrustDomain)
	return &requester{spiffeID: id, err: err}, true
}

// access answers whether asker may call a, under the policy of a's workload.
func (s *Server) access(a Agent, asker *requester) *authz.Access {
	unknown := func(reason string) *authz.Access { return &authz.Access{Result: authz.AccessUnknown, Reason: reason} }
	switch {
	case asker.err != nil:
		return unknown(asker.err.Error())
	case s.Remote != nil && a.Cluster != s.LocalCluster:
		return unknown("a federated card: this cluster does not know the policy of cluster " + strconv.Quote(a.Cluster))
	case a.workload == "":
		return unknown("the AgentCard selects pods by label (no spec.targetRef), so no workload's policy applies to it")
	case !s.Policies.Synced():
		return unknown("the agents' policies are not loaded yet; retry")
	}
	ans := s.Policies.Policy(a.Namespace, a.workload).MayCall(asker.spiffeID)
	return &ans
}

// boolParam parses an optional boolean query parameter ("" is false).
func boolParam(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("must be true or false")
	}
	return b, nil
}
