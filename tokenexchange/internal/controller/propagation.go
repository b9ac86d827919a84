package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

// Propagation: which of a workload's pods run the ConfigMap content this controller last wrote.
//
// Neither step between the write and the effect is visible in the API: the kubelet projects a
// changed ConfigMap into the pod's volume on its own schedule (its sync period, about a minute by
// default), and each kagenti-authbridge role loads the file when it changes. So the controller
// asks the roles: each serves GET /status on its status port, with the content hash it runs
// (sidecar.Status, the same type the roles encode), the error of a rejected file, and the
// settings that wait for a pod restart. The alternatives need grants no workload or controller
// should hold: a sidecar patching its own pod's annotations needs pods/patch for every agent's
// service account (each pod could then relabel its neighbours, and netpol's and agentcard's
// decisions with them); reading a file through the API server's pod proxy needs pods/proxy or
// nodes/proxy. Reading the pod IP needs only the network path to the status ports, which
// proxy-init never redirects: the path the kubelet's probes take. docs/identity.md says what a
// NetworkPolicy must allow.

// statusPorts maps the components that run a kagenti-authbridge role to their status ports (each
// role serves its own, also when one authbridge container runs several). spiffe-helper reads its configuration once and reports no hash; proxy-init has exited.
var statusPorts = map[string]int32{
	contract.ComponentClientRegistration: sidecar.RegisterStatusPort,
	contract.ComponentAuthProxy:          sidecar.InboundStatusPort,
	contract.ComponentEnvoyProxy:         sidecar.OutboundStatusPort,
}

const (
	// statusBodyLimit bounds what a pod can make the controller read.
	statusBodyLimit = 64 << 10
	// probeConcurrency bounds the /status requests of one reconcile.
	probeConcurrency = 8
	// propagatingRetry: how soon a TokenExchange whose pods are still on an older content looks
	// again (pod status endpoints are not API objects: nothing else wakes the reconciler). Short
	// enough for the seed's "pods on the new hash within 10 s".
	propagatingRetry = 2 * time.Second
	// unreachableRetry: how soon it looks again when a pod's status endpoint does not answer.
	unreachableRetry = 10 * time.Second
	// listedPods: how many pods a condition message names.
	listedPods = 5
)

// NewPodStatusClient is the HTTP client for the roles' /status: short timeouts (a reconcile
// waits for it), no HTTP proxy from the environment (pod IPs are reached directly), and no idle
// connections kept to pods that are asked once per configuration change.
func NewPodStatusClient() *http.Client {
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: time.Second}).DialContext,
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: 2 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// PodStatusProber reads the configuration the identity sidecars of pods run. It remembers, per
// TokenExchange, the pods already seen on a content hash: a pod that runs the current content
// keeps running it until the content changes, so a steady workload costs no request.
type PodStatusProber struct {
	Client *http.Client

	mu    sync.Mutex
	known map[types.NamespacedName]map[types.UID]podObservation
}

// NewPodStatusProber returns a prober using client (NewPodStatusClient when nil).
func NewPodStatusProber(client *http.Client) *PodStatusProber {
	if client == nil {
		client = NewPodStatusClient()
	}
	return &PodStatusProber{Client: client, known: map[types.NamespacedName]map[types.UID]podObservation{}}
}

// podObservation is what one pod's roles reported.
type podObservation struct {
	name string
	// hash is the content hash every role runs; empty when they differ or one could not be read.
	hash string
	// runs describes what the roles run when they are not all on the wanted content.
	runs string
	// rejected: a role refused the latest content (its error), and keeps the previous one.
	rejected string
	// unreachable: a role's /status could not be read (why).
	unreachable string
	// pendingRestart: startup settings the pod's roles run with old values.
	pendingRestart []string
	// startedWithoutContent: a role started on the injector's defaults alone (no ConfigMap
	// content in the volume yet).
	startedWithoutContent bool
	// ownedElsewhere: a role refused a client owned by another workload (its message).
	ownedElsewhere string
	// notReady: a role reported it is not ready. Such a pod is asked again at every reconcile
	// (and a reconcile comes back for it): a role may turn a wait into a refusal without any
	// change the pod informer sees.
	notReady bool
	// ready is the pod's container readiness (cachedPod.ready) when it was asked: a change (a
	// role that refuses a client fails its readiness probe) means asking again.
	ready uint8
}

// current: o, made when pod's containers had their present readiness, is the steady state of a
// pod on content want, which Probe need not ask again.
func (o podObservation) current(pod *cachedPod, want string) bool {
	return o.hash == want && want != "" && !o.notReady && o.ownedElsewhere == "" && o.ready == pod.ready
}

// Propagation is the state of one TokenExchange's pods against the content it wants.
type Propagation struct {
	// Want is the kagenti.io/content-hash of the ConfigMap as last written.
	Want string
	// Pods counts the pods asked (running, mounting the ConfigMap).
	Pods int
	// Current are the pods whose every role runs Want.
	Current []string
	// Behind, Rejected, Unreachable: pod name → what it runs, its roles' error, why it could not be read.
	Behind, Rejected, Unreachable map[string]string
	// PendingRestart: pod name → startup settings it runs with old values.
	PendingRestart map[string][]string
	// StartedWithoutContent: the pods of PendingRestart whose roles started before any content
	// of the ConfigMap reached them (restart.go).
	StartedWithoutContent map[string]bool
	// OwnedElsewhere: pod name → the refusal of its register role (sidecar.ReasonClientOwnedElsewhere).
	OwnedElsewhere map[string]string
	// NotReady counts the pods with a role that reported it is not ready.
	NotReady int
}

// Forget drops what is remembered for a deleted TokenExchange.
func (p *PodStatusProber) Forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.known, key)
}

// Probe reads the status of pods' roles and compares it with want.
func (p *PodStatusProber) Probe(ctx context.Context, key types.NamespacedName, pods []*cachedPod, want string) Propagation {
	p.mu.Lock()
	before := p.known[key]
	p.mu.Unlock()

	obs := make([]podObservation, len(pods))
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	for i, pod := range pods {
		if o, ok := before[pod.UID]; ok && o.current(pod, want) {
			obs[i] = o
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			obs[i] = p.observe(ctx, pod, want)
		}()
	}
	wg.Wait()

	now := map[types.UID]podObservation{}
	prop := Propagation{Want: want, Pods: len(pods), Behind: map[string]string{}, Rejected: map[string]string{},
		Unreachable: map[string]string{}, PendingRestart: map[string][]string{}, OwnedElsewhere: map[string]string{},
		StartedWithoutContent: map[string]bool{}}
	for i, o := range obs {
		if o.current(pods[i], want) {
			now[pods[i].UID] = o // only a pod on the wanted content, all ready, stays there: remember it
		}
		if o.notReady {
			prop.NotReady++
		}
		switch {
		case o.ownedElsewhere != "":
			prop.OwnedElsewhere[o.name] = o.ownedElsewhere
		case o.unreachable != "":
			prop.Unreachable[o.name] = o.unreachable
		case o.rejected != "":
			prop.Rejected[o.name] = o.rejected
		case o.hash == want:
			prop.Current = append(prop.Current, o.name)
		default:
			prop.Behind[o.name] = o.runs
		}
		if len(o.pendingRestart) > 0 {
			prop.PendingRestart[o.name] = o.pendingRestart
			if o.startedWithoutContent {
				prop.StartedWithoutContent[o.name] = true
			}
		}
	}
	sort.Strings(prop.Current)
	p.mu.Lock()
	p.known[key] = now
	p.mu.Unlock()
	return prop
}

// observe asks every role of pod for its status.
func (p *PodStatusProber) observe(ctx context.Context, pod *cachedPod, want string) podObservation {
	o := podObservation{name: pod.Name, ready: pod.ready}
	containers := pod.roles
	if len(containers) == 0 {
		// Nothing in the pod follows the file at run time (spiffe-helper alone): the content it
		// mounts is all there is to run.
		o.hash = want
		return o
	}
	if pod.ip == "" {
		o.unreachable = "no pod IP yet"
		return o
	}
	hashes := map[string][]string{} // hash → containers
	var rejected, unreachable, ownedElsewhere []string
	for _, c := range containers {
		st, err := p.status(ctx, pod.ip, statusPorts[c])
		if err != nil {
			unreachable = append(unreachable, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		hashes[st.ContentHash] = append(hashes[st.ContentHash], c)
		o.notReady = o.notReady || !st.Ready
		// Only the refusal this controller knows becomes a reason: what a pod answers is not
		// trusted to name a condition reason (an invalid one would fail the status write).
		if r := st.Refusal; r != nil && r.Reason == sidecar.ReasonClientOwnedElsewhere {
			ownedElsewhere = append(ownedElsewhere, fmt.Sprintf("%s: %s", c, r.Message))
		}
		if st.ConfigError != "" {
			rejected = append(rejected, fmt.Sprintf("%s: %s", c, st.ConfigError))
		}
		o.startedWithoutContent = o.startedWithoutContent || st.StartedWithoutContent
		for _, s := range st.PendingRestart {
			if !slices.Contains(o.pendingRestart, s) {
				o.pendingRestart = append(o.pendingRestart, s)
			}
		}
	}
	sort.Strings(o.pendingRestart)
	o.unreachable = strings.Join(unreachable, "; ")
	o.rejected = strings.Join(rejected, "; ")
	o.ownedElsewhere = strings.Join(ownedElsewhere, "; ")
	if len(unreachable) == 0 && len(hashes) == 1 {
		for h := range hashes {
			o.hash = h
		}
	}
	var runs []string
	for h, cs := range hashes {
		on := "content " + h
		if h == "" {
			on = "the injector's defaults only"
		}
		runs = append(runs, fmt.Sprintf("%s on %s", strings.Join(cs, ", "), on))
	}
	sort.Strings(runs)
	o.runs = strings.Join(runs, "; ")
	return o
}

func (p *PodStatusProber) status(ctx context.Context, ip string, port int32) (*sidecar.Status, error) {
	u := "http://" + net.JoinHostPort(ip, strconv.Itoa(int(port))) + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var st sidecar.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, statusBodyLimit)).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return &st, nil
}

// setPropagation records prop in the status: the pod counts, the content hash, and the
// conditions ConfigPropagated and StartupSettingsCurrent. It returns how soon to look again
// (0: the pods have settled; a change of the pods or the spec wakes the reconciler).
func (st status) setPropagation(prop Propagation, cmName, restartHint string) time.Duration {
	st.Pods = int32(prop.Pods)
	st.ConfiguredPods = int32(len(prop.Current))
	st.ContentHash = prop.Want
	var retry time.Duration
	switch {
	case prop.Pods == 0:
		st.set(v1alpha1.ConditionConfigPropagated, true, v1alpha1.ReasonNoPods,
			fmt.Sprintf("no running pod mounts ConfigMap %s", cmName))
	case len(prop.OwnedElsewhere) > 0:
		st.set(v1alpha1.ConditionConfigPropagated, false, v1alpha1.ReasonClientOwnedElsewhere, prop.ownedElsewhereMessage())
	case len(prop.Rejected) > 0:
		st.set(v1alpha1.ConditionConfigPropagated, false, v1alpha1.ReasonConfigRejected,
			fmt.Sprintf("%d of %d pods run content %s; the sidecars of %s rejected it and keep the previous configuration",
				len(prop.Current), prop.Pods, prop.Want, describe(prop.Rejected)))
		if len(prop.Behind) > 0 {
			retry = propagatingRetry
		}
	case len(prop.Behind) > 0:
		st.set(v1alpha1.ConditionConfigPropagated, false, v1alpha1.ReasonPropagating,
			fmt.Sprintf("%d of %d pods run content %s of ConfigMap %s; waiting for the kubelet to update the volume of %s",
				len(prop.Current), prop.Pods, prop.Want, cmName, describe(prop.Behind)))
		retry = propagatingRetry
	case len(prop.Unreachable) > 0:
		st.set(v1alpha1.ConditionConfigPropagated, false, v1alpha1.ReasonStatusUnavailable,
			fmt.Sprintf("%d of %d pods run content %s; the sidecars' /status of %s could not be read (a NetworkPolicy must let the controller reach ports 15124-15126)",
				len(prop.Current), prop.Pods, prop.Want, describe(prop.Unreachable)))
		retry = unreachableRetry
	default:
		st.set(v1alpha1.ConditionConfigPropagated, true, v1alpha1.ReasonPropagated,
			fmt.Sprintf("all %d pods run content %s of ConfigMap %s", prop.Pods, prop.Want, cmName))
	}
	if (len(prop.Behind) > 0 && len(prop.Unreachable) > 0 || prop.NotReady > 0) && retry == 0 {
		retry = unreachableRetry
	}
	if len(prop.PendingRestart) == 0 {
		st.set(v1alpha1.ConditionStartupSettingsCurrent, true, v1alpha1.ReasonCurrent,
			"every pod runs the startup settings (ports, traffic interception, spiffe-helper) of its current content")
	} else {
		pending := map[string]string{}
		for pod, settings := range prop.PendingRestart {
			pending[pod] = strings.Join(settings, ", ")
		}
		st.set(v1alpha1.ConditionStartupSettingsCurrent, false, v1alpha1.ReasonRestartRequired,
			fmt.Sprintf("%s still run the previous values of settings that take effect only when a pod starts; %s",
				describe(pending), restartHint))
	}
	return retry
}

// ownedElsewhereMessage says which pods' register role refused which client, and whose it is.
func (prop Propagation) ownedElsewhereMessage() string {
	return fmt.Sprintf("%d of %d pods run content %s; the client-registration sidecars of %s refused to touch the client they would register, and the pods get no client credentials",
		len(prop.Current), prop.Pods, prop.Want, describe(prop.OwnedElsewhere))
}

// describe lists pods with what is said of each, sorted, at most listedPods of them.
func describe(m map[string]string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for i, n := range names {
		if i == listedPods {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-listedPods))
			break
		}
		parts = append(parts, fmt.Sprintf("pod %s (%s)", n, m[n]))
	}
	return strings.Join(parts, ", ")
}
