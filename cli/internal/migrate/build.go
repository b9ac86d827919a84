package migrate

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	buildv1 "github.com/kagenti/platform/agentbuild/api/v1alpha1"
)

// buildInput is a legacy AgentBuild and the AgentBuild made from it.
type buildInput struct {
	Input
	ledger  *Ledger
	out     *buildv1.AgentBuild
	notes   []string
	emitted bool
}

func (b *buildInput) object() (*Object, error) {
	u, err := toUnstructured(b.out)
	if err != nil {
		return nil, err
	}
	return &Object{Unstructured: u, From: []Source{b.Source}, Notes: b.notes}, nil
}

func (m *migrator) migrateBuilds() error {
	for _, key := range m.buildOrder {
		if err := m.build(m.builds[key]); err != nil {
			return err
		}
	}
	return nil
}

// Reasons for the legacy AgentBuild fields without an equivalent.
const (
	reasonTemplateOnly   = "only pipeline templates use it; AgentBuild parameters are a name and a value"
	reasonRepoUser       = "AgentBuild clones with the Secret in spec.source.credentialsSecret, which carries the user name (a basic-auth Secret's username)"
	reasonPipelineNS     = "AgentBuild reads its pipeline templates and step ConfigMaps from the controller's --template-namespace (kagenti-system by default); copy step ConfigMaps there if they lived elsewhere"
	reasonBuildMetadata  = "labels and annotations the kagenti-operator's build put on the agent; the migrated Deployment carries the Agent's own"
	reasonRequiredParams = "AgentBuild has no per-step list of required parameters; a missing parameter fails the build's template resolution"
)

func (m *migrator) build(b *buildInput) error {
	obj := b.Object
	name := obj.GetName()
	where := fmt.Sprintf("%s: AgentBuild %s", b.Source.Where, name)
	l := m.ledger(b.Input)
	b.ledger = l
	ref := "AgentBuild/" + name
	out := &buildv1.AgentBuild{
		TypeMeta:   metav1.TypeMeta{APIVersion: buildv1.GroupVersion.String(), Kind: "AgentBuild"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: obj.GetNamespace()},
	}
	l.Used(P("metadata", "name"), "names the AgentBuild")
	l.Used(P("metadata", "namespace"), "namespace of the AgentBuild")
	copyMetadata(l, obj, ref, &out.Labels, &out.Annotations)

	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(obj.Object, path...)
		return s
	}
	// Source.
	repo := str("spec", "source", "sourceRepository")
	if repo == "" {
		return fmt.Errorf("%s: spec.source.sourceRepository is empty: an AgentBuild needs the repository to build", where)
	}
	if hasScheme(repo) {
		out.Spec.Source.Repository = repo
		l.Copied(P("spec", "source", "sourceRepository"), ref, P("spec", "source", "repository"))
	} else {
		out.Spec.Source.Repository = "https://" + repo
		l.Used(P("spec", "source", "sourceRepository"), "spec.source.repository "+out.Spec.Source.Repository+" (AgentBuild needs a URL with its scheme; https assumed)")
		b.notes = append(b.notes, "spec.source.repository: https:// added to "+repo)
	}
	if out.Spec.Source.Revision = str("spec", "source", "sourceRevision"); out.Spec.Source.Revision != "" {
		l.Copied(P("spec", "source", "sourceRevision"), ref, P("spec", "source", "revision"))
	}
	if out.Spec.Source.Subfolder = str("spec", "source", "sourceSubfolder"); out.Spec.Source.Subfolder != "" {
		l.Copied(P("spec", "source", "sourceSubfolder"), ref, P("spec", "source", "subfolder"))
	}
	l.NotMigrated(P("spec", "source", "repoUser"), reasonRepoUser)
	if out.Spec.Source.CredentialsSecret = str("spec", "source", "sourceCredentials", "name"); out.Spec.Source.CredentialsSecret != "" {
		l.Copied(P("spec", "source", "sourceCredentials", "name"), ref, P("spec", "source", "credentialsSecret"))
	}

	// Pipeline.
	l.NotMigrated(P("spec", "pipeline", "namespace"), reasonPipelineNS)
	if steps, found, _ := unstructured.NestedSlice(obj.Object, "spec", "pipeline", "steps"); found {
		for i, raw := range steps {
			s, _ := raw.(map[string]any)
			from := P("spec", "pipeline", "steps", Index(i))
			to := P("spec", "pipeline", "steps", Index(i))
			step := buildv1.PipelineStep{}
			step.Name, _ = s["name"].(string)
			step.ConfigMap, _ = s["configMap"].(string)
			l.Copied(from.Child("name"), ref, to.Child("name"))
			l.Copied(from.Child("configMap"), ref, to.Child("configMap"))
			if e, ok := s["enabled"].(bool); ok {
				step.Enabled = &e
				l.Copied(from.Child("enabled"), ref, to.Child("enabled"))
			}
			l.NotMigrated(from.Child("requiredParameters"), reasonRequiredParams)
			step.Parameters = parameters(l, s["parameters"], from.Child("parameters"), ref, to.Child("parameters"))
			out.Spec.Pipeline = orNew(out.Spec.Pipeline)
			out.Spec.Pipeline.Steps = append(out.Spec.Pipeline.Steps, step)
		}
	}
	if params, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "pipeline", "parameters"); found {
		if ps := parameters(l, params, P("spec", "pipeline", "parameters"), ref, P("spec", "pipeline", "parameters")); len(ps) > 0 {
			out.Spec.Pipeline = orNew(out.Spec.Pipeline)
			out.Spec.Pipeline.Parameters = ps
		}
	}
	if args, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "buildArgs"); found {
		for _, p := range parameters(l, args, P("spec", "buildArgs"), ref, P("spec", "buildArgs")) {
			out.Spec.BuildArgs = append(out.Spec.BuildArgs, buildv1.BuildArg(p))
		}
	}

	// Output.
	out.Spec.BuildOutput.Image = str("spec", "buildOutput", "image")
	if out.Spec.BuildOutput.Image == "" {
		return fmt.Errorf("%s: spec.buildOutput.image is empty: an AgentBuild needs the image to push", where)
	}
	l.Copied(P("spec", "buildOutput", "image"), ref, P("spec", "buildOutput", "image"))
	if out.Spec.BuildOutput.Tag = str("spec", "buildOutput", "imageTag"); out.Spec.BuildOutput.Tag != "" {
		l.Copied(P("spec", "buildOutput", "imageTag"), ref, P("spec", "buildOutput", "tag"))
	}
	if out.Spec.BuildOutput.Registry = str("spec", "buildOutput", "imageRegistry"); out.Spec.BuildOutput.Registry != "" {
		l.Copied(P("spec", "buildOutput", "imageRegistry"), ref, P("spec", "buildOutput", "registry"))
	}
	if out.Spec.BuildOutput.CredentialsSecret = str("spec", "buildOutput", "imageRepoCredentials", "name"); out.Spec.BuildOutput.CredentialsSecret != "" {
		l.Copied(P("spec", "buildOutput", "imageRepoCredentials", "name"), ref, P("spec", "buildOutput", "credentialsSecret"))
	}
	if cleanup, found, _ := unstructured.NestedBool(obj.Object, "spec", "cleanupAfterBuild"); found {
		if cleanup {
			l.Used(P("spec", "cleanupAfterBuild"), "true is AgentBuild's default")
		} else {
			out.Spec.CleanupAfterBuild = &cleanup
			l.Copied(P("spec", "cleanupAfterBuild"), ref, P("spec", "cleanupAfterBuild"))
		}
	}
	switch mode := str("spec", "mode"); mode {
	case "":
	case "dev-local":
		out.Spec.Mode = buildv1.ModeDev
		l.Used(P("spec", "mode"), "mode dev: dev-local pushed to the in-cluster registry, which AgentBuild's dev mode does")
		b.notes = append(b.notes, "spec.mode: dev (was dev-local)")
	default:
		out.Spec.Mode = buildv1.BuildMode(mode)
		l.Copied(P("spec", "mode"), ref, P("spec", "mode"))
	}
	l.NotMigrated(P("spec", "labels"), reasonBuildMetadata)
	l.NotMigrated(P("spec", "annotations"), reasonBuildMetadata)
	b.out = out
	return nil
}

// parameters converts a legacy []ParameterSpec (name, value, required, description).
func parameters(l *Ledger, raw any, from Path, ref string, to Path) []buildv1.Parameter {
	list, _ := raw.([]any)
	var out []buildv1.Parameter
	for i, e := range list {
		p, _ := e.(map[string]any)
		name, _ := p["name"].(string)
		value, _ := p["value"].(string)
		out = append(out, buildv1.Parameter{Name: name, Value: value})
		l.Copied(from.Child(Index(i), "name"), ref, to.Child(Index(i), "name"))
		l.Copied(from.Child(Index(i), "value"), ref, to.Child(Index(i), "value"))
		l.NotMigrated(from.Child(Index(i), "required"), reasonTemplateOnly)
		l.NotMigrated(from.Child(Index(i), "description"), reasonTemplateOnly)
	}
	return out
}

func hasScheme(repo string) bool {
	for _, p := range []string{"http://", "https://", "ssh://", "git@"} {
		if strings.HasPrefix(repo, p) {
			return true
		}
	}
	return false
}

// copyMetadata carries a legacy object's labels and annotations (but kubectl's last-applied copy)
// to the labels and annotations of the object made from it, creating the maps when there is
// something to copy.
func copyMetadata(l *Ledger, obj *unstructured.Unstructured, ref string, labels, annotations *map[string]string) {
	for k, v := range obj.GetLabels() {
		if *labels == nil {
			*labels = map[string]string{}
		}
		(*labels)[k] = v
		l.Copied(P("metadata", "labels", k), ref, P("metadata", "labels", k))
	}
	for k, v := range obj.GetAnnotations() {
		if k == lastApplied {
			continue
		}
		if *annotations == nil {
			*annotations = map[string]string{}
		}
		(*annotations)[k] = v
		l.Copied(P("metadata", "annotations", k), ref, P("metadata", "annotations", k))
	}
}

// wireBuild points the Agent's AgentBuild at the migrated Deployment (deployTo) and chooses the
// container image: the image the build produced, else the image it will push.
func (m *migrator) wireBuild(in Input, l *Ledger, w *workload, tmpl *corev1.PodTemplateSpec, parts *agentParts) error {
	containers := tmpl.Spec.Containers
	idx := 0
	for i, c := range containers {
		if c.Name == "agent" {
			idx = i
			break
		}
	}
	c := &containers[idx]
	imagePath := parts.templatePath.Child("containers", Index(idx), "image")
	b := m.builds[in.Object.GetNamespace()+"/"+parts.buildRef]
	if b == nil {
		if !validImage(c.Image) {
			return fmt.Errorf("%s: Agent %s: spec.imageSource.buildRef names AgentBuild %s, which is not among the inputs, and container %s has no image to run meanwhile: add the AgentBuild's file (-f) or migrate --from-cluster",
				in.Source.Where, in.Object.GetName(), parts.buildRef, c.Name)
		}
		l.NotMigrated(P("spec", "imageSource", "buildRef"), fmt.Sprintf("AgentBuild %s is not among the inputs: the Deployment keeps container %s's image %s; migrate that AgentBuild too so that its builds reach the Deployment (deployTo)", parts.buildRef, c.Name, c.Image))
		return nil
	}
	if b.out == nil {
		return fmt.Errorf("%s: Agent %s: AgentBuild %s could not be migrated", in.Source.Where, in.Object.GetName(), parts.buildRef)
	}
	b.out.Spec.DeployTo = &buildv1.DeployTo{TargetRef: w.targetRef(), Container: c.Name}
	w.build = b
	l.Used(P("spec", "imageSource", "buildRef"), fmt.Sprintf("AgentBuild %s: spec.deployTo sets the image of container %s of Deployment %s after each successful build", parts.buildRef, c.Name, w.name))
	b.notes = append(b.notes, fmt.Sprintf("spec.deployTo: Deployment %s, container %s (the Agent %s built from it)", w.name, c.Name, in.Object.GetName()))

	image := ""
	if built, _, _ := unstructured.NestedString(b.Object.Object, "status", "builtImage"); built != "" {
		image = built
		b.ledger.Used(P("status", "builtImage"), fmt.Sprintf("the image of container %s of Deployment %s", c.Name, w.name))
		w.notes = append(w.notes, fmt.Sprintf("container %s: image %s, the last image AgentBuild %s built", c.Name, built, parts.buildRef))
	} else if out := b.out.Spec.BuildOutput; out.Registry != "" {
		image = out.Registry + "/" + out.Image + ":" + b.out.Spec.TagOrDefault()
		w.notes = append(w.notes, fmt.Sprintf("container %s: image %s, which AgentBuild %s will push (it has not built one yet); deployTo pins its digest after a successful build, and until then the pods wait for the image as the Agent waited for its build", c.Name, image, parts.buildRef))
	} else if validImage(c.Image) {
		w.notes = append(w.notes, fmt.Sprintf("container %s: keeps its image %s until AgentBuild %s succeeds (the build has no registry to name its image by)", c.Name, c.Image, parts.buildRef))
		return nil
	} else {
		return fmt.Errorf("%s: Agent %s: AgentBuild %s has built no image yet and names no registry, and container %s has no image to run meanwhile", in.Source.Where, in.Object.GetName(), parts.buildRef, c.Name)
	}
	if c.Image != "" && c.Image != image {
		l.NotMigrated(imagePath, fmt.Sprintf("replaced by the image of AgentBuild %s, as the kagenti-operator did", parts.buildRef))
	}
	c.Image = image
	return nil
}
