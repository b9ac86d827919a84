package configmap_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// InjectedParts reads every status version the injector has written: v1 lists the names, v2 to v4
// name only what was kept, over their version's lists.
func TestInjectedPartsFollowsTheStatusAnnotation(t *testing.T) {
	tmpl := func(status string) *corev1.PodTemplateSpec {
		t := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "proxy-init"}, {Name: "client-registration"}, {Name: "setup"}},
			Containers:     []corev1.Container{{Name: "agent"}, {Name: "authbridge"}},
			Volumes:        []corev1.Volume{{Name: "kagenti-shared"}, {Name: "data"}, {Name: "kagenti-trace"}},
		}}
		if status != "" {
			t.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{contract.InjectionStatusAnnotation: status}}
		}
		return t
	}
	names := func(in configmap.Injected) (inits, containers, volumes []string) {
		for _, c := range in.InitContainers {
			inits = append(inits, c.Name)
		}
		for _, c := range in.Containers {
			containers = append(containers, c.Name)
		}
		for _, v := range in.Volumes {
			volumes = append(volumes, v.Name)
		}
		return
	}
	for _, tc := range []struct {
		status                     string
		inits, containers, volumes []string
	}{
		{"", nil, nil, nil},
		{"{not json", nil, nil, nil},
		{`{"version":"v4","hash":"0"}`, []string{"proxy-init"}, []string{"authbridge"}, []string{"kagenti-shared", "kagenti-trace"}},
		{`{"version":"v4","hash":"0","kept":["authbridge","kagenti-trace"]}`, []string{"proxy-init"}, nil, []string{"kagenti-shared"}},
		{`{"version":"v2","hash":"0"}`, []string{"proxy-init", "client-registration"}, nil, []string{"kagenti-shared", "kagenti-trace"}},
		{`{"version":"v1","hash":"0","initContainers":["client-registration"],"volumes":["kagenti-trace"]}`, []string{"client-registration"}, nil, []string{"kagenti-trace"}},
	} {
		inits, containers, volumes := names(configmap.InjectedParts(tmpl(tc.status)))
		require.Equal(t, tc.inits, inits, tc.status)
		require.Equal(t, tc.containers, containers, tc.status)
		require.Equal(t, tc.volumes, volumes, tc.status)
	}
}
