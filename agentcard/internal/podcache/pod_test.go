package podcache

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/agentcard/internal/intern"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// fullPod is a pod as the API server returns it from a Deployment: owner, annotations,
// managedFields, two containers, the status a kubelet writes.
func fullPod(i int) *corev1.Pod {
	now := metav1.Now()
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("weather-7b6c8747f-%05d", i), GenerateName: "weather-7b6c8747f-", Namespace: "agents",
			UID: types.UID(fmt.Sprintf("6f1c2d9e-0000-4000-8000-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i), CreationTimestamp: now,
			Labels:          map[string]string{"app": "weather", "pod-template-hash": "7b6c8747f", v1alpha1.LabelSignatureVerified: "true"},
			Annotations:     map[string]string{"kagenti.io/injected": "true", "kubectl.kubernetes.io/restartedAt": now.String()},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "weather-7b6c8747f", UID: "rs-uid", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: corev1.PodSpec{ServiceAccountName: "weather", NodeName: "node-1", Containers: []corev1.Container{
			{Name: "proxy", Image: "proxy:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}},
			{Name: "agent", Image: "agent:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}, {Name: "a2a", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.%d.%d", i/250, i%250), HostIP: "192.168.0.1",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}, StartTime: &now,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", Ready: true, Image: "agent:1", ImageID: "sha256:abc"}}},
	}
}

// What agentcard keeps of a pod answers every question it asks of a pod as the full one does.
func TestPodKeepsWhatAgentcardReads(t *testing.T) {
	full := fullPod(1)
	deleting := fullPod(2)
	deleting.DeletionTimestamp = &metav1.Time{Time: deleting.CreationTimestamp.Add(1)}
	notReady := fullPod(3)
	notReady.Status.Conditions[1].Status = corev1.ConditionFalse
	httpOnly := fullPod(4)
	httpOnly.Spec.Containers = httpOnly.Spec.Containers[:1]
	noPort := fullPod(5)
	noPort.Spec.Containers = nil
	pending := fullPod(6)
	pending.Status.Phase = corev1.PodPending
	noIP := fullPod(7)
	noIP.Status.PodIP = ""
	wantServing := map[string]bool{full.Name: true, httpOnly.Name: true, noPort.Name: true}
	wantPort := map[string]int32{full.Name: 8000, httpOnly.Name: 8080, noPort.Name: DefaultPort}
	for _, p := range []*corev1.Pod{full, deleting, notReady, httpOnly, noPort, pending, noIP} {
		small := From(p.DeepCopy())
		assert.Equal(t, wantServing[p.Name], small.Serving, p.Name)
		if port, ok := wantPort[p.Name]; ok {
			_, got, _ := Endpoint(&v1alpha1.AgentCard{}, small)
			assert.Equal(t, port, got, "%s: a2a wins over http, in any container; else the default", p.Name)
		}
		assert.Equal(t, p.Labels, small.Labels)
		assert.Equal(t, []any{p.Name, p.Namespace, p.UID, p.ResourceVersion, p.CreationTimestamp, p.DeletionTimestamp, p.Spec.ServiceAccountName, p.Status.PodIP},
			[]any{small.Name, small.Namespace, small.UID, small.ResourceVersion, small.CreationTimestamp, small.DeletionTimestamp, small.ServiceAccount, small.IP})
		assert.Empty(t, small.Annotations)
		assert.Empty(t, small.OwnerReferences)
		assert.Empty(t, small.ManagedFields)
		assert.Empty(t, small.GenerateName)
	}
	// spec.endpoint.port wins over the pod's own ports.
	small := From(full)
	_, port, _ := Endpoint(&v1alpha1.AgentCard{Spec: v1alpha1.AgentCardSpec{Endpoint: &v1alpha1.Endpoint{Port: 9999}}}, small)
	assert.Equal(t, int32(9999), port)
	// The informer's store keys it like any object; a deep copy shares no labels.
	key, err := toolscache.MetaNamespaceKeyFunc(small)
	require.NoError(t, err)
	assert.Equal(t, full.Namespace+"/"+full.Name, key)
	cp := small.DeepCopyObject().(*Pod)
	cp.Labels["app"] = "other"
	assert.Equal(t, "weather", small.Labels["app"])
}

// The label index holds each label of a pod (kit.SlimPods keys it under the pod's namespace),
// leaving out the labels no sync looks pods up by.
func TestPodLabelIndexValues(t *testing.T) {
	assert.Equal(t, []string{"app=weather"}, Indexes[LabelIndex](From(fullPod(1))))
}

// namespacedLabelKeys are a pod's entries in LabelIndex as kit.SlimPods' indexer stores them.
func namespacedLabelKeys(obj any) ([]string, error) {
	p := obj.(*Pod)
	vals := IndexValues(p)
	for i, v := range vals {
		vals[i] = p.Namespace + "/" + v
	}
	return vals, nil
}

// BenchmarkPodFootprint reports the heap a cached pod holds: each pod decoded from its JSON
// as the informer decodes it, transformed (From), and only the result kept (what it shares with the
// decoded one, such as the name and UID strings, counts; the rest is garbage). retained-B/pod is
// the number behind the controller's memory at 1,000 AgentCards × 3 pods.
func BenchmarkPodFootprint(b *testing.B) {
	const n = 3000
	docs := make([][]byte, n)
	for i := range docs {
		docs[i], _ = json.Marshal(fullPod(i))
	}
	var retained uint64
	for range b.N {
		retained = retainedHeap(func() any {
			kept := make([]any, n)
			for i, doc := range docs {
				var p corev1.Pod
				if err := json.Unmarshal(doc, &p); err != nil {
					b.Fatal(err)
				}
				kept[i] = From(&p)
			}
			return kept
		})
	}
	b.ReportMetric(float64(retained)/n, "retained-B/pod")
}

// retainedHeap is the heap that what build returns still holds after a collection.
func retainedHeap(build func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return after.HeapAlloc - before.HeapAlloc
}

// BenchmarkPodLabelIndexFootprint reports the heap LabelIndex holds for 3,000 cached pods of
// 1,000 AgentCards (3 pods each, labels app=<card>, tier=agent and a pod-template-hash), as the
// informer's indexer keeps it: "namespaced" is how kit.SlimPods keeps it,
// "field-indexer" the same values as the manager's field indexer stores them, each a second time
// under its cluster-wide "__all_namespaces/" key.
func BenchmarkPodLabelIndexFootprint(b *testing.B) {
	const n = 3000
	pods := make([]*Pod, n)
	for i := range pods {
		pods[i] = From(fullPod(i))
		pods[i].Labels = intern.Labels(map[string]string{"app": fmt.Sprintf("agent-%04d", i/3), "tier": "agent", "pod-template-hash": "7b6c8747f"})
	}
	fieldIndexer := func(obj any) ([]string, error) {
		vals, err := namespacedLabelKeys(obj)
		for _, v := range IndexValues(obj.(*Pod)) {
			vals = append(vals, "__all_namespaces/"+v)
		}
		return vals, err
	}
	for _, bc := range []struct {
		name  string
		index toolscache.IndexFunc
	}{{"namespaced", namespacedLabelKeys}, {"field-indexer", fieldIndexer}} {
		b.Run(bc.name, func(b *testing.B) {
			var retained uint64
			for range b.N {
				retained = retainedHeap(func() any {
					indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{LabelIndex: bc.index})
					for _, p := range pods {
						if err := indexer.Add(p); err != nil {
							b.Fatal(err)
						}
					}
					return indexer
				})
			}
			b.ReportMetric(float64(retained)/n, "retained-B/pod")
		})
	}
}

// With --namespaces the pods are watched per namespace, each informer with its own indexes: a
// sync finds the pods of its namespace (through the label index and by scanning), a pod of a
// namespace not watched is not cached, and get answers for watched namespaces only.
func TestPodInformersPerNamespace(t *testing.T) {
	mk := func(ns, name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	}
	cs := k8sfake.NewClientset(mk("a", "a-1", map[string]string{"app": "x"}), mk("b", "b-1", map[string]string{"app": "x"}),
		mk("c", "c-1", map[string]string{"app": "x"}))
	pi := New(cs, []string{"a", "b"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() { _ = pi.Start(ctx) }()
	require.NoError(t, pi.WaitForSync(ctx))
	indexed := labels.SelectorFromSet(labels.Set{"app": "x"})
	scanned, err := labels.Parse("app in (x,y)")
	require.NoError(t, err)
	for _, ns := range []string{"a", "b"} {
		for _, sel := range []labels.Selector{indexed, scanned} {
			got, err := Selected(pi, ns, sel)
			require.NoError(t, err)
			require.Len(t, got, 1, "%s %s", ns, sel)
			assert.Equal(t, ns+"-1", got[0].Name)
		}
		_, ok := pi.Get(types.NamespacedName{Namespace: ns, Name: ns + "-1"})
		assert.True(t, ok, ns)
	}
	got, err := Selected(pi, "c", indexed)
	require.NoError(t, err)
	assert.Empty(t, got, "a namespace not watched")
	_, ok := pi.Get(types.NamespacedName{Namespace: "c", Name: "c-1"})
	assert.False(t, ok)
}
