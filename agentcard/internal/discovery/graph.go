package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/util/cache"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap/callgraph"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// GraphSubresource is what GET /v1/graph asks the caller's rights for: get on agentcards/graph
// in the namespace (a subresource the API server does not serve; RBAC grants it like any other).
// Who calls whom is more than a card says, so list on agentcards is not enough.
const GraphSubresource = "graph"

// Bounds of one graph request.
const (
	// MaxGraphPods is the most pods one request reads; the others are reported unavailable.
	MaxGraphPods = 1000
	// DefaultScrapeTTL is how long one pod's counts are reused by later requests.
	DefaultScrapeTTL = 10 * time.Second
	// DefaultScrapeTimeout bounds one pod's answer.
	DefaultScrapeTimeout = 2 * time.Second
	// maxExposition bounds what is read of one pod's /metrics (an authbridge serves ≈ 10–30 KB).
	maxExposition = 4 << 20
	scrapeEntries = 4096
	scrapeWorkers = 8
)

// Graph is the delegation graph of this cluster's agents, as their pods' authbridge counted the
// calls into them.
type Graph struct {
	// Agents are the AgentCards in scope.
	Agents []GraphAgent `json:"agents"`
	// Edges are the calls into them, by callee, caller and chain.
	Edges []GraphEdge `json:"edges"`
	// Pods is how many pods answered; Unavailable says why the others did not.
	Pods        int      `json:"pods"`
	Unavailable []string `json:"unavailable,omitempty"`
}

// GraphAgent is one node of the graph: an AgentCard.
type GraphAgent struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// SpiffeID is the card's verified and bound signing identity; empty otherwise.
	SpiffeID string `json:"spiffeID,omitempty"`
	Verified bool   `json:"verified"`
	Bound    bool   `json:"bound"`
}

// GraphEdge is the calls into the agent To (namespace/name) from Caller, through Via.
type GraphEdge struct {
	To string `json:"to"`
	callgraph.Edge
	// CallerAgent and ViaAgents name the AgentCards (namespace/name) whose verified and bound
	// signing identity is the caller and each workload of the chain; "" where no such card is.
	CallerAgent string   `json:"callerAgent,omitempty"`
	ViaAgents   []string `json:"viaAgents,omitempty"`
}

// CallCounter reads the calls one pod's authbridge counted.
type CallCounter interface {
	Calls(ctx context.Context, podIP string) ([]callgraph.Edge, error)
}

// MetricsScraper reads a pod's calls from its authbridge inbound status port
// (contract.StatusPortInbound, contract.MetricsPath; proxy-init never redirects it). Answers are
// reused for TTL, concurrent requests for one pod share one read, and at most scrapeEntries pods
// are remembered.
type MetricsScraper struct {
	// Client does the reads (nil: a client with Timeout and no redirects).
	Client *http.Client
	// Port is the status port (contract.StatusPortInbound when 0).
	Port int
	// TTL is DefaultScrapeTTL when 0, Timeout DefaultScrapeTimeout.
	TTL, Timeout time.Duration

	once   sync.Once
	cache  *cache.LRUExpireCache // pod IP → scrapeResult
	flight singleflight.Group
}

type scrapeResult struct {
	edges []callgraph.Edge
	err   error
}

func (m *MetricsScraper) init() {
	m.once.Do(func() {
		if m.Port == 0 {
			m.Port = contract.StatusPortInbound
		}
		if m.TTL <= 0 {
			m.TTL = DefaultScrapeTTL
		}
		if m.Timeout <= 0 {
			m.Timeout = DefaultScrapeTimeout
		}
		if m.Client == nil {
			m.Client = &http.Client{
				Timeout:       m.Timeout,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
		}
		m.cache = cache.NewLRUExpireCache(scrapeEntries)
	})
}

// Calls implements CallCounter.
func (m *MetricsScraper) Calls(ctx context.Context, podIP string) ([]callgraph.Edge, error) {
	m.init()
	if v, ok := m.cache.Get(podIP); ok {
		r := v.(scrapeResult)
		return r.edges, r.err
	}
	ch := m.flight.DoChan(podIP, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.Timeout)
		defer cancel()
		edges, err := m.read(rctx, podIP)
		m.cache.Add(podIP, scrapeResult{edges, err}, m.TTL)
		return scrapeResult{edges, err}, nil
	})
	select {
	case r := <-ch:
		res := r.Val.(scrapeResult)
		return res.edges, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *MetricsScraper) read(ctx context.Context, podIP string) ([]callgraph.Edge, error) {
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(m.Port)) + contract.MetricsPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExposition+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxExposition {
		return nil, fmt.Errorf("%s: more than %d bytes of metrics", url, maxExposition)
	}
	return callgraph.Parse(body)
}

// graph serves GET /v1/graph?namespace=&name=.
func (s *Server) graph(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns, name := q.Get("namespace"), q.Get("name")
	if name != "" && ns == "" {
		writeError(w, http.StatusBadRequest, "name needs namespace")
		return
	}
	if _, ok := s.authorize(w, r, Access{Verb: "get", Namespace: ns, Name: name, Subresource: GraphSubresource}); !ok {
		return
	}
	if c := q.Get("cluster"); s.Remote != nil && c != "" && c != s.LocalCluster {
		writeError(w, http.StatusBadRequest, "the graph covers this cluster's agents only (cluster "+strconv.Quote(s.LocalCluster)+"): ask the member cluster's discovery API")
		return
	}
	if s.Calls == nil {
		writeError(w, http.StatusNotFound, "this discovery API serves no graph")
		return
	}
	var all v1alpha1.AgentCardList
	if err := s.Reader.List(r.Context(), &all); err != nil { // every namespace: callers are named wherever their card is
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	g, err := buildGraph(r.Context(), s.Calls, all.Items, ns, name)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, g)
}

// buildGraph reads the calls into the cards in scope (namespace ns, or every one; one card when
// name is set) from their pods, and names callers by the cards of every namespace.
func buildGraph(ctx context.Context, calls CallCounter, cards []v1alpha1.AgentCard, ns, name string) (*Graph, error) {
	g := &Graph{Agents: []GraphAgent{}, Edges: []GraphEdge{}}
	byID := map[string]string{} // verified, bound SPIFFE ID → namespace/name
	type pod struct{ agent, name, ip string }
	var pods []pod
	seen := map[string]bool{}
	for i := range cards {
		c := &cards[i]
		key := c.Namespace + "/" + c.Name
		node := GraphAgent{Namespace: c.Namespace, Name: c.Name}
		if sig := c.Status.Signature; sig != nil && sig.Verified {
			node.Verified = true
			if b := c.Status.Binding; b != nil && b.Bound && sig.SpiffeID != "" {
				node.Bound, node.SpiffeID = true, sig.SpiffeID
				if _, taken := byID[sig.SpiffeID]; !taken { // cards are listed in order: the first keeps it
					byID[sig.SpiffeID] = key
				}
			}
		}
		if (ns != "" && c.Namespace != ns) || (name != "" && c.Name != name) {
			continue
		}
		g.Agents = append(g.Agents, node)
		for _, pc := range c.Status.Cards {
			if pc.PodIP == "" || seen[key+"/"+pc.PodIP] {
				continue
			}
			seen[key+"/"+pc.PodIP] = true
			pods = append(pods, pod{agent: key, name: pc.PodName, ip: pc.PodIP})
		}
	}
	if len(pods) > MaxGraphPods {
		g.Unavailable = append(g.Unavailable, fmt.Sprintf("%d pods not read: one request reads at most %d (narrow it with ?namespace= or ?name=)", len(pods)-MaxGraphPods, MaxGraphPods))
		pods = pods[:MaxGraphPods]
	}

	results := make([]scrapeResult, len(pods))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(scrapeWorkers, len(pods)) {
		wg.Go(func() {
			for i := range work {
				results[i].edges, results[i].err = calls.Calls(ctx, pods[i].ip)
			}
		})
	}
	for i := range pods {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	perAgent := map[string]*callgraph.Edges{}
	for i, p := range pods {
		if err := results[i].err; err != nil {
			g.Unavailable = append(g.Unavailable, p.agent+" pod "+p.name+": "+describeScrapeError(err))
			continue
		}
		g.Pods++
		if perAgent[p.agent] == nil {
			perAgent[p.agent] = &callgraph.Edges{}
		}
		perAgent[p.agent].Add(results[i].edges...)
	}
	agents := make([]string, 0, len(perAgent))
	for a := range perAgent {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	for _, a := range agents {
		for _, e := range perAgent[a].List() {
			edge := GraphEdge{To: a, Edge: e, CallerAgent: byID[e.Caller]}
			for _, v := range e.Via {
				edge.ViaAgents = append(edge.ViaAgents, byID[v])
			}
			g.Edges = append(g.Edges, edge)
		}
	}
	return g, nil
}

// describeScrapeError shortens what a pod without an authbridge (nothing listens on the status
// port) answers.
func describeScrapeError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "no authbridge status port (" + op.Err.Error() + ")"
	}
	return err.Error()
}
