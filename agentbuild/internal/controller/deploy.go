package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/duck"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
)

// deploy puts the built image into spec.deployTo's container, once per built image: when the
// status already records this image for this target and container, the workload is not touched
// again, so a user who later changes the image by hand is not overridden.
func (r *Reconciler) deploy(ctx context.Context, b *v1alpha1.AgentBuild, s status) error {
	to := b.Spec.DeployTo
	if s.Phase != v1alpha1.PhaseSucceeded {
		s.set(v1alpha1.ConditionDeployed, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingBuild, "the image is deployed after a successful build")
		return nil
	}
	target := to.TargetRef.String()
	if d := s.Deployment; d != nil && d.Image == s.BuiltImage && d.Target == target && d.Container == to.Container {
		s.set(v1alpha1.ConditionDeployed, metav1.ConditionTrue, v1alpha1.ReasonImageDeployed, "container %s of %s runs %s", to.Container, target, s.BuiltImage)
		return nil
	}
	w, err := r.Resolver.Resolve(ctx, b.Namespace, to.TargetRef)
	if err != nil {
		if reason := duck.ReasonOf(err); reason != "" {
			s.deployFailed(reason, err.Error())
			return nil
		}
		return err
	}
	path, current, err := containerImagePath(w, to.Container)
	if err != nil {
		s.deployFailed(v1alpha1.ReasonContainerNotFound, err.Error())
		return nil
	}
	if current != s.BuiltImage {
		patch, err := imagePatch(path, to.Container, s.BuiltImage)
		if err != nil {
			return err
		}
		// A JSON patch that first tests the container's name and then replaces only its image:
		// nothing else in the workload is written, and a concurrent reorder fails the test instead
		// of changing the wrong container.
		if err := r.Client.Patch(ctx, w.Object(), client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(fieldOwner)); err != nil {
			s.deployFailed(v1alpha1.ReasonDeployFailed, fmt.Sprintf("patching %s: %v", target, err))
			return err
		}
		r.event(b, "Normal", v1alpha1.ReasonImageDeployed, "Deploy", fmt.Sprintf("set container %s of %s to %s", to.Container, target, s.BuiltImage))
	}
	s.Deployment = &v1alpha1.DeploymentStatus{Target: target, Container: to.Container, Image: s.BuiltImage}
	s.set(v1alpha1.ConditionDeployed, metav1.ConditionTrue, v1alpha1.ReasonImageDeployed, "container %s of %s runs %s", to.Container, target, s.BuiltImage)
	return nil
}

// deployFailed reports a build whose image could not be deployed: Reconciling while the target may
// still appear (it is watched) or the patch is retried, Stalled when only a change to deployTo or
// the workload helps.
func (s status) deployFailed(reason, msg string) {
	s.set(v1alpha1.ConditionDeployed, metav1.ConditionFalse, reason, "%s", msg)
	ready := fmt.Sprintf("built %s but could not deploy it: %s", s.BuiltImage, msg)
	switch reason {
	case duck.ReasonTargetNotFound, v1alpha1.ReasonDeployFailed:
		s.MarkReconciling(reason, ready)
	default: // UnsupportedKind, InvalidTargetRef, ContainerNotFound
		s.MarkStalled(reason, ready)
	}
}

// containerImagePath returns the JSON pointer of the named container (containers first, then init
// containers, which include native sidecars) and its current image.
func containerImagePath(w *duck.Workload, name string) (string, string, error) {
	t, err := w.PodTemplate()
	if err != nil {
		return "", "", err
	}
	base := "/" + strings.Join(w.TemplatePath(), "/") + "/spec/"
	var names []string
	for i, c := range t.Spec.Containers {
		if c.Name == name {
			return base + "containers/" + strconv.Itoa(i), c.Image, nil
		}
		names = append(names, c.Name)
	}
	for i, c := range t.Spec.InitContainers {
		if c.Name == name {
			return base + "initContainers/" + strconv.Itoa(i), c.Image, nil
		}
		names = append(names, c.Name)
	}
	return "", "", fmt.Errorf("%s %q has no container %q (it has: %s)", w.Kind(), w.Name(), name, strings.Join(names, ", "))
}

func imagePatch(containerPath, name, image string) ([]byte, error) {
	return json.Marshal([]map[string]string{
		{"op": "test", "path": containerPath + "/name", "value": name},
		{"op": "replace", "path": containerPath + "/image", "value": image},
	})
}
