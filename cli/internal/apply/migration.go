package apply

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/cli/internal/migrate"
	"github.com/kagenti/platform/pkg/duck"
)

// UpstreamFinalizer is the kagenti-operator's finalizer on Agents: when an Agent is deleted, the
// operator deletes the Deployment and the Service named after it, whoever owns them by then.
const UpstreamFinalizer = "agent.kagenti.dev/finalizer"

// AnnotationInjectionStatus is written by the injector on the pod templates it injected.
const AnnotationInjectionStatus = "kagenti.io/injection-status"

// MigrationOptions tune ApplyMigration.
type MigrationOptions struct {
	// DeleteOld deletes the legacy objects once the migrated ones are applied (orphaning what they own).
	DeleteOld bool
	// DryRunOnly stops after the server dry run, saying what applying would do.
	DryRunOnly bool
	// Out receives one line per object, kubectl style.
	Out io.Writer
}

// planned is one migrated object with what the dry run said about it.
type planned struct {
	obj     *migrate.Object
	live    *unstructured.Unstructured // nil when the object does not exist yet
	result  *unstructured.Unstructured // the object the dry run would store
	adopted []string                   // legacy owners whose ownerReferences are removed
}

// ApplyMigration applies a migration: a server dry run of every object first (nothing is written
// when one fails), then the adoption of what the legacy objects owned (their ownerReferences are
// removed, so deleting them no longer deletes the workload), the real apply, and with DeleteOld the
// deletion of the legacy objects.
func (a *Applier) ApplyMigration(ctx context.Context, res *migrate.Result, opts MigrationOptions) error {
	legacy, err := a.liveLegacy(ctx, res.Migrated)
	if err != nil {
		return err
	}
	owners := map[string]bool{}
	ownerNames := map[string]string{}
	for _, l := range legacy {
		owners[string(l.GetUID())] = true
		ownerNames[string(l.GetUID())] = l.GetKind() + " " + l.GetNamespace() + "/" + l.GetName()
	}

	// 1. Dry run of everything.
	var plan []*planned
	var failures []string
	for _, o := range res.Objects {
		p := &planned{obj: o}
		live, err := a.Clients.Get(ctx, o.GroupVersionKind(), o.GetNamespace(), o.GetName())
		switch {
		case err == nil:
			p.live = live
		case apierrors.IsNotFound(err):
			if o.Patch {
				failures = append(failures, fmt.Sprintf("%s: not found; the AgentRuntime's target must exist (migrate writes only its labels)", a.ref(o.Unstructured)))
				continue
			}
		case meta.IsNoMatchError(err):
			failures = append(failures, fmt.Sprintf("%s: the cluster does not serve %s (is its CRD installed? kagenti check says)", a.ref(o.Unstructured), o.GroupVersionKind()))
			continue
		default:
			failures = append(failures, fmt.Sprintf("%s: %v", a.ref(o.Unstructured), err))
			continue
		}
		if p.result, err = a.Apply(ctx, o.Unstructured, true); err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", a.ref(o.Unstructured), err))
			continue
		}
		if p.live != nil {
			for _, ref := range p.live.GetOwnerReferences() {
				if owners[string(ref.UID)] {
					p.adopted = append(p.adopted, ownerNames[string(ref.UID)])
				}
			}
		}
		plan = append(plan, p)
	}
	if len(failures) > 0 {
		return fmt.Errorf("the server dry run refused %d of %d objects; nothing was applied:\n  %s", len(failures), len(res.Objects), strings.Join(failures, "\n  "))
	}
	fmt.Fprintf(opts.Out, "server dry run: all %d objects accepted\n", len(plan))
	a.warnNamespaces(ctx, opts.Out, plan)
	if opts.DryRunOnly {
		for _, p := range plan {
			fmt.Fprintf(opts.Out, "%s %s (server dry run)\n", a.ref(p.obj.Unstructured), describeChange(p))
		}
		return nil
	}

	// 2. Adoption, then 3. the real apply.
	for _, p := range plan {
		if len(p.adopted) > 0 {
			if _, err := RemoveOwnerReferences(ctx, a.Clients, p.live, owners); err != nil {
				return fmt.Errorf("%s: removing the legacy owner reference: %w", a.ref(p.obj.Unstructured), err)
			}
		}
		if _, err := a.Apply(ctx, p.obj.Unstructured, false); err != nil {
			return fmt.Errorf("%s: %w", a.ref(p.obj.Unstructured), err)
		}
		fmt.Fprintf(opts.Out, "%s %s\n", a.ref(p.obj.Unstructured), describeChange(p))
	}

	// 4. The legacy objects.
	for _, l := range legacy {
		ref := Ref(l.GroupVersionKind(), l.GetName())
		if !opts.DeleteOld {
			fmt.Fprintf(opts.Out, "%s left in place (--delete-old deletes it; what it owned no longer depends on it)\n", ref)
			continue
		}
		note, err := a.deleteLegacy(ctx, l)
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		fmt.Fprintf(opts.Out, "%s deleted%s\n", ref, note)
	}
	return nil
}

func (a *Applier) ref(u *unstructured.Unstructured) string {
	ref := Ref(u.GroupVersionKind(), u.GetName())
	if ns := u.GetNamespace(); ns != "" {
		return ns + "/" + ref
	}
	return ref
}

// liveLegacy reads the legacy objects from the cluster (those read from files may be there too).
func (a *Applier) liveLegacy(ctx context.Context, inputs []migrate.Input) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, in := range inputs {
		gvk := in.Object.GroupVersionKind()
		u, err := a.Clients.Get(ctx, gvk, in.Object.GetNamespace(), in.Object.GetName())
		switch {
		case err == nil:
			if in.Source.UID != "" && u.GetUID() != in.Source.UID {
				continue // deleted and re-created since it was read: not the object that was migrated
			}
			out = append(out, u)
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		default:
			return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, in.Object.GetNamespace(), in.Object.GetName(), err)
		}
	}
	return out, nil
}

// describeChange says what applying p did, and for workloads whether their pods restart.
func describeChange(p *planned) string {
	var parts []string
	switch {
	case p.live == nil:
		parts = append(parts, "created")
	case sameObject(p.live, p.result):
		parts = append(parts, "unchanged")
	default:
		parts = append(parts, "configured")
	}
	if len(p.adopted) > 0 {
		parts = append(parts, "adopted from "+strings.Join(p.adopted, ", ")+" (owner reference removed)")
	}
	if w, err := duck.NewWorkload(p.result); err == nil {
		parts = append(parts, podsEffect(p.live, p.result, w.TemplatePath()))
	}
	return strings.Join(parts, "; ")
}

// podsEffect compares the live pod template with the one the dry run returned.
func podsEffect(live, result *unstructured.Unstructured, path []string) string {
	after, _, _ := unstructured.NestedMap(result.Object, path...)
	injected := annotation(after, AnnotationInjectionStatus) != ""
	if live == nil {
		if injected {
			return "its pods start with the injected sidecars"
		}
		return "its pods start without injection (is the namespace labelled kagenti.io/injection=enabled?)"
	}
	before, _, _ := unstructured.NestedMap(live.Object, path...)
	if reflect.DeepEqual(before, after) {
		return "pod template unchanged: its pods keep running"
	}
	why := "the pod template changes"
	if annotation(before, AnnotationInjectionStatus) != annotation(after, AnnotationInjectionStatus) {
		why = "the injector adds its sidecars"
		if !injected {
			why = "the injector removes its sidecars"
		}
	}
	return why + ": its pods roll once"
}

func annotation(tmpl map[string]any, key string) string {
	v, _, _ := unstructured.NestedString(tmpl, "metadata", "annotations", key)
	return v
}

// sameObject compares what the user sees of two versions of one object.
func sameObject(a, b *unstructured.Unstructured) bool {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
		unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(c.Object, "status")
		return c.Object
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// warnNamespaces says which namespaces of injected workloads the injector does not act in.
func (a *Applier) warnNamespaces(ctx context.Context, out io.Writer, plan []*planned) {
	seen := map[string]bool{}
	var missing []string
	for _, p := range plan {
		if p.obj.GetLabels()[migrate.LabelInject] != "enabled" || seen[p.obj.GetNamespace()] || p.obj.GetNamespace() == "" {
			continue
		}
		seen[p.obj.GetNamespace()] = true
		ns, err := a.Clients.Kube.CoreV1().Namespaces().Get(ctx, p.obj.GetNamespace(), metav1.GetOptions{})
		if err != nil {
			continue
		}
		if v := ns.Labels[migrate.LabelInjection]; v != "enabled" && v != "true" {
			missing = append(missing, ns.Name)
		}
	}
	sort.Strings(missing)
	for _, ns := range missing {
		fmt.Fprintf(out, "warning: namespace %s is not labelled %s=enabled: its workloads are not injected until it is (kubectl label namespace %s %s=enabled)\n",
			ns, migrate.LabelInjection, ns, migrate.LabelInjection)
	}
}

// deleteLegacy deletes a legacy object, orphaning its dependents. The kagenti-operator's finalizer
// would delete the Deployment and Service named after the Agent, which are now the migrated ones, so
// it is removed first; the delete is conditional on the resourceVersion that removal produced, so an
// operator re-adding its finalizer in between makes migrate retry instead of losing the workload.
func (a *Applier) deleteLegacy(ctx context.Context, obj *unstructured.Unstructured) (string, error) {
	ri, _, err := a.Clients.Resource(obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return "", err
	}
	note := " (dependents orphaned)"
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return note, nil
		}
		if err != nil {
			return "", err
		}
		if cur.GetUID() != obj.GetUID() {
			return " (already replaced by a newer object; left alone)", nil
		}
		had := len(cur.GetFinalizers())
		if cur, err = RemoveFinalizer(ctx, a.Clients, cur, UpstreamFinalizer); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsInvalid(err) || isTestFailed(err) {
				continue
			}
			return "", err
		}
		if len(cur.GetFinalizers()) < had {
			note = fmt.Sprintf(" (finalizer %s removed first: it would have deleted the migrated Deployment and Service; dependents orphaned)", UpstreamFinalizer)
		}
		uid, rv := cur.GetUID(), cur.GetResourceVersion()
		err = ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{
			PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan),
			Preconditions:     &metav1.Preconditions{UID: (*types.UID)(&uid), ResourceVersion: &rv},
		})
		if apierrors.IsConflict(err) {
			continue
		}
		if apierrors.IsNotFound(err) {
			return note, nil
		}
		return note, err
	}
	return "", errors.New("it kept changing while migrate deleted it (is its controller still running?); run migrate again")
}

func isTestFailed(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && strings.Contains(status.Status().Message, "test")
}
