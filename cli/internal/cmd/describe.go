package cmd

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/cli/internal/describe"
	"github.com/kagenti/platform/cli/internal/kube"
)

func newDescribe(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "describe (TYPE/NAME | TYPE NAME)",
		Aliases: []string{"status"},
		Short:   "Show everything Kagenti did to one workload",
		Long: `Describe shows, for one workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob
or any kind with a pod template):

  - the injection: the components in the kagenti.io/injection-status annotation and how many pods
    run the injected template, or every reason it is not injected (namespace label, workload
    label, webhook not registered, template not admitted since);
  - every kagenti.io object that targets it (TokenExchange, AgentTrace, AgentCard, AgentBuild, and
    any kind a newer pillar adds) with its conditions;
  - the ConfigMaps {workload}-token-exchange and {workload}-trace: written or not, by whom, and
    whether the pods mount them and run their current content;
  - its AgentCard (verified, bound identity, skills), its NetworkPolicy, its last AgentBuild.

-o json and -o yaml print the same as data, for scripts.`,
		Example: `  kagenti describe deployment/weather-agent -n agents
  kagenti status deploy weather-agent -n agents -o json | jq .injection`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("-o %s: json or yaml (or nothing, for text)", output)
			}
			if _, _, err := splitWorkloadArg(args); err != nil {
				return err
			}
			c, ns, err := o.clientsInNamespace()
			if err != nil {
				return err
			}
			gvk, name, err := workloadArg(c, args)
			if err != nil {
				return err
			}
			r, err := describe.Gather(cmd.Context(), c, gvk, ns, name)
			if err != nil {
				return err
			}
			switch output {
			case "json":
				raw, err := json.MarshalIndent(r, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(o.streams.Out, string(raw))
				return err
			case "yaml":
				raw, err := yaml.Marshal(r)
				if err != nil {
					return err
				}
				_, err = o.streams.Out.Write(raw)
				return err
			}
			return r.WriteText(o.streams.Out)
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeWorkloads(cmd, o), cobra.ShellCompDirectiveNoFileComp
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: text)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// workloadArg resolves "deployment/name", "deploy name", "statefulsets.apps/name" to a kind and name.
func workloadArg(c *kube.Clients, args []string) (schema.GroupVersionKind, string, error) {
	typ, name, err := splitWorkloadArg(args)
	if err != nil {
		return schema.GroupVersionKind{}, "", err
	}
	gvr, gr := schema.ParseResourceArg(strings.ToLower(typ))
	var gvk schema.GroupVersionKind
	if gvr != nil {
		if gvk, err = c.Mapper.KindFor(*gvr); err == nil {
			return gvk, name, nil
		}
	}
	if gvk, err = c.Mapper.KindFor(gr.WithVersion("")); err != nil {
		return schema.GroupVersionKind{}, "", fmt.Errorf("the cluster has no resource type %q: %w", typ, err)
	}
	return gvk, name, nil
}

func splitWorkloadArg(args []string) (typ, name string, err error) {
	switch {
	case len(args) == 2:
		typ, name = args[0], args[1]
	case strings.Contains(args[0], "/"):
		typ, name, _ = strings.Cut(args[0], "/")
	}
	if typ == "" || name == "" {
		return "", "", fmt.Errorf("%q: give TYPE/NAME or TYPE NAME, e.g. deployment/weather-agent", strings.Join(args, " "))
	}
	return typ, name, nil
}

// clientsInNamespace are the clients and the namespace a workload is looked up in.
func (o *options) clientsInNamespace() (*kube.Clients, string, error) {
	c, err := o.clients()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := o.namespace()
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

func completeWorkloads(cmd *cobra.Command, o *options) []string {
	c, ns, err := o.clientsInNamespace()
	if err != nil {
		return nil
	}
	var out []string
	for _, kind := range []string{"deployment", "statefulset", "daemonset", "job", "cronjob"} {
		gvk, _, err := workloadArg(c, []string{kind + "/x"})
		if err != nil {
			continue
		}
		items, err := c.List(cmd.Context(), gvk, ns, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, it := range items {
			out = append(out, kind+"/"+it.GetName())
		}
	}
	return out
}
