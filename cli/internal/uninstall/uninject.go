package uninstall

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kagenti/platform/pkg/duck"
)

// What --uninject does to each labelled workload.
const (
	noteRolls       = "its pods roll once"
	noteCronJob     = "its next Jobs start without the sidecars"
	noteNotInjected = "labelled but not injected: only the label changes"
	noteJob         = "left as is: a Job's pod template cannot change; it ends with its sidecars"
)

// uninjectStep labels every injected workload kagenti.io/inject=disabled while the webhook is still
// registered: the injector then removes exactly what it injected (its status annotation lists it),
// which restores the user's pod template. The pods roll once.
func (u *uninstaller) uninjectStep(ctx context.Context) (step, error) {
	var items []item
	for _, gvk := range duck.BuiltinKinds() {
		list, err := u.c.List(ctx, gvk, "", metav1.ListOptions{LabelSelector: LabelInject + "=enabled"})
		if err != nil {
			if isGone(err) {
				continue
			}
			return step{}, err
		}
		for i := range list {
			o := &list[i]
			it := item{gvk: gvk, namespace: o.GetNamespace(), name: o.GetName(), obj: o}
			w, err := duck.NewWorkload(o)
			if err != nil {
				continue
			}
			tmpl, err := w.PodTemplate()
			if err != nil {
				continue
			}
			_, injected := tmpl.Annotations[AnnotationInjected]
			switch {
			case gvk.Kind == "Job":
				it.note = noteJob
			case !injected:
				it.note = noteNotInjected
			case gvk.Kind == "CronJob":
				it.note = noteCronJob
			default:
				it.note = noteRolls
			}
			items = append(items, it)
		}
	}
	if injected := countInjected(items); injected > 0 {
		registered, err := u.injectorRegistered(ctx)
		if err != nil {
			return step{}, err
		}
		if !registered {
			return step{}, fmt.Errorf("--uninject: %d workloads are injected, but the injector's webhook (inject.kagenti.io) is not registered, and only the injector can remove exactly what it injected: register it again (reinstall the injector), then run uninstall --uninject", injected)
		}
	}
	return step{
		title: "strip the injected components (--uninject): label every injected workload " + LabelInject + "=disabled while the webhook is installed, so the injector restores the templates exactly; this rolls their pods once",
		items: items, empty: "no workload is labelled " + LabelInject + "=enabled",
		run: func(ctx context.Context) error { return u.uninject(ctx, items) },
	}, nil
}

func (u *uninstaller) uninject(ctx context.Context, items []item) error {
	patch := []byte(`{"metadata":{"labels":{"` + LabelInject + `":"disabled"}}}`)
	gone := map[int]bool{} // deleted since they were listed: nothing to strip
	for i, it := range items {
		if it.gvk.Kind == "Job" {
			continue
		}
		ri, _, err := u.c.Resource(it.gvk, it.namespace)
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, it.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kagenti-uninstall"}); err != nil {
			if isGone(err) {
				gone[i] = true
				continue
			}
			return fmt.Errorf("labelling %s: %w", it, err)
		}
	}
	for i, it := range items {
		if it.gvk.Kind == "Job" || gone[i] {
			continue
		}
		if err := u.waitUninjected(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// waitUninjected waits until the template carries no injection and the rollout finished.
func (u *uninstaller) waitUninjected(ctx context.Context, it item) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, u.opts.Timeout, true, func(ctx context.Context) (bool, error) {
		o, err := u.c.Get(ctx, it.gvk, it.namespace, it.name)
		if isGone(err) {
			return true, nil // deleted meanwhile: nothing left to strip
		}
		if err != nil {
			return false, err
		}
		w, err := duck.NewWorkload(o)
		if err != nil {
			return false, err
		}
		tmpl, err := w.PodTemplate()
		if err != nil {
			return false, err
		}
		if _, injected := tmpl.Annotations[AnnotationInjected]; injected {
			last = "the template is still injected (is the injector running? it strips on the label change)"
			return false, nil
		}
		if it.gvk.Kind == "CronJob" {
			return true, nil
		}
		rd := w.Readiness()
		last = rd.Message
		return rd.Ready, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %s after %s", it, last, u.opts.Timeout)
	}
	return nil
}

func countInjected(items []item) int {
	n := 0
	for _, it := range items {
		if it.note == noteRolls || it.note == noteCronJob {
			n++
		}
	}
	return n
}

func (u *uninstaller) injectorRegistered(ctx context.Context) (bool, error) {
	hooks, err := u.webhookConfigs(ctx)
	if err != nil {
		return false, err
	}
	for _, h := range hooks {
		if h.gvk == mwcGVK && hasWebhook(h.obj, "inject.kagenti.io") {
			return true, nil
		}
	}
	return false, nil
}
