package controller

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

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

// The trimmed pod answers every question agentcard asks of a pod as the full one does, and keeps
// nothing else.
func TestTrimPodKeepsWhatAgentcardReads(t *testing.T) {
	full := fullPod(1)
	deleting := fullPod(2)
	deleting.DeletionTimestamp = &metav1.Time{Time: deleting.CreationTimestamp.Add(1)}
	notReady := fullPod(3)
	notReady.Status.Conditions[1].Status = corev1.ConditionFalse
	httpOnly := fullPod(4)
	httpOnly.Spec.Containers = httpOnly.Spec.Containers[:1]
	noPort := fullPod(5)
	noPort.Spec.Containers = nil
	for _, p := range []*corev1.Pod{full, deleting, notReady, httpOnly, noPort} {
		o, err := TrimPod(p.DeepCopy())
		assert.NoError(t, err)
		slim := o.(*corev1.Pod)
		assert.Equal(t, isServing(p), isServing(slim), p.Name)
		card := &v1alpha1.AgentCard{}
		s1, port1, paths1 := endpointFor(card, p)
		s2, port2, paths2 := endpointFor(card, slim)
		assert.Equal(t, []any{s1, port1, paths1}, []any{s2, port2, paths2}, p.Name)
		assert.Equal(t, p.Labels, slim.Labels)
		assert.Equal(t, []any{p.Name, p.Namespace, p.UID, p.ResourceVersion, p.CreationTimestamp, p.DeletionTimestamp, p.Spec.ServiceAccountName, p.Status.PodIP},
			[]any{slim.Name, slim.Namespace, slim.UID, slim.ResourceVersion, slim.CreationTimestamp, slim.DeletionTimestamp, slim.Spec.ServiceAccountName, slim.Status.PodIP})
		assert.Empty(t, slim.Annotations)
		assert.Empty(t, slim.OwnerReferences)
		assert.Empty(t, slim.ManagedFields)
		assert.Empty(t, slim.GenerateName)
		assert.Empty(t, slim.Spec.NodeName)
		assert.LessOrEqual(t, len(slim.Spec.Containers), 1, "one container: the card port's")
		assert.Empty(t, slim.Status.ContainerStatuses)
		assert.Empty(t, slim.Status.PodIPs)
	}
	assert.Equal(t, int32(8000), namedPort(full), "a2a wins over http, in any container")
	assert.Equal(t, int32(8080), namedPort(httpOnly))
	assert.Equal(t, int32(DefaultPort), namedPort(noPort))
}

// BenchmarkTrimmedPodFootprint reports the heap a cached pod holds: each pod decoded from its JSON
// as the informer decodes it, trimmed, and only the trimmed object kept (what it shares with the
// decoded one, such as the name and UID strings, counts; the rest is garbage). retained-B/pod is
// the number behind the controller's memory at 1,000 AgentCards × 3 pods.
func BenchmarkTrimmedPodFootprint(b *testing.B) {
	const n = 3000
	docs := make([][]byte, n)
	for i := range docs {
		docs[i], _ = json.Marshal(fullPod(i))
	}
	var retained uint64
	for range b.N {
		kept := make([]any, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i, doc := range docs {
			var p corev1.Pod
			if err := json.Unmarshal(doc, &p); err != nil {
				b.Fatal(err)
			}
			kept[i], _ = TrimPod(&p)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		retained = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(kept)
	}
	b.ReportMetric(float64(retained)/n, "retained-B/pod")
}

// BenchmarkPodLabelIndexFootprint reports the heap PodLabelIndex holds for 3,000 cached pods of
// 1,000 AgentCards (3 pods each, labels app=<card>, tier=agent and a pod-template-hash), as the
// informer's indexer keeps it: "namespaced" is namespacedPodIndexValues (IndexPodLabels),
// "field-indexer" the same values as the manager's field indexer stores them, each a second time
// under its cluster-wide "__all_namespaces/" key.
func BenchmarkPodLabelIndexFootprint(b *testing.B) {
	const n = 3000
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		p, _ := TrimPod(fullPod(i))
		pods[i] = p.(*corev1.Pod)
		pods[i].Labels = internLabels(map[string]string{"app": fmt.Sprintf("agent-%04d", i/3), "tier": "agent", "pod-template-hash": "7b6c8747f"})
	}
	fieldIndexer := func(obj any) ([]string, error) {
		vals, err := namespacedPodIndexValues(obj)
		for _, v := range podIndexValues(obj.(*corev1.Pod)) {
			vals = append(vals, "__all_namespaces/"+v)
		}
		return vals, err
	}
	for _, bc := range []struct {
		name  string
		index toolscache.IndexFunc
	}{{"namespaced", namespacedPodIndexValues}, {"field-indexer", fieldIndexer}} {
		b.Run(bc.name, func(b *testing.B) {
			var retained uint64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{PodLabelIndex: bc.index})
				for _, p := range pods {
					if err := indexer.Add(p); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				retained = after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(indexer)
			}
			b.ReportMetric(float64(retained)/n, "retained-B/pod")
		})
	}
}
