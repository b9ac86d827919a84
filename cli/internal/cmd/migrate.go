package cmd

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kagenti/platform/cli/internal/apply"
	"github.com/kagenti/platform/cli/internal/manifest"
	"github.com/kagenti/platform/cli/internal/migrate"
)

type migrateOptions struct {
	*options
	files          []string
	recursive      bool
	fromCluster    bool
	allNamespaces  bool
	output         string
	apply          bool
	dryRun         string
	deleteOld      bool
	fieldManager   string
	forceConflicts bool
	distribution   string
	strict         bool
}

func newMigrate(o *options) *cobra.Command {
	m := &migrateOptions{options: o}
	cmd := &cobra.Command{
		Use:   "migrate (-f FILENAME | --from-cluster) [--apply]",
		Short: "Turn legacy Agent objects into a workload and pillar CRs",
		Long: `Migrate converts legacy objects into their composition equivalent:

  agent.kagenti.dev/v1alpha1 Agent (kagenti-operator), kagenti.io/v1alpha1 Agent (design example)
      → a Deployment labelled kagenti.io/inject=enabled and kagenti.io/type=agent, with the
        Agent's labels, annotations, replicas, pod template and image; a Service for its
        servicePorts; for an upstream Agent, what the kagenti-operator added at run time (its
        ServiceAccount, Role and RoleBinding, security contexts, the cache volume)
  spec.imageSource.buildRef → the AgentBuild, with spec.deployTo wired to the Deployment
  agent.kagenti.dev/v1alpha1 AgentRuntime → the labels on its target workload, a TokenExchange
      (trust domain) and an AgentTrace (OTLP exporter, sampling)
  agent.kagenti.dev/v1alpha1 AgentCard, AgentBuild → kagenti.io/v1alpha1 AgentCard, AgentBuild

Pillar CRs are written only where a setting differs from the defaults (a TokenExchange when the
agent does not serve on 8081, where the injected auth-proxy forwards by default).

Every field of the input is migrated or listed, with the reason, under "Not migrated" on stderr;
--strict turns such a list into a failure.

Output: YAML on stdout, -o json, or -o DIR/ (one file per object). --apply applies the result with
server-side apply (field manager kagenti-migrate): a server dry run of every object first (nothing
is applied when one is refused), then for real. The objects the legacy ones owned (the Deployment
the kagenti-operator made for an Agent) are adopted: their owner references to the legacy object are
removed, and when the pod template already matches no pod restarts. The legacy objects stay unless
--delete-old.`,
		Example: `  # Convert a file (or a directory, or - for stdin) and look at the result
  kagenti migrate -f agents.yaml

  # Write one file per object
  kagenti migrate -f agents.yaml -o migrated/

  # Migrate every legacy object of a namespace in place, and delete the legacy objects
  kagenti migrate --from-cluster -n team-a --apply --delete-old

  # Only check what the API server would say
  kagenti migrate --from-cluster -A --apply --dry-run=server`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return m.run(cmd) },
	}
	f := cmd.Flags()
	f.StringSliceVarP(&m.files, "filename", "f", nil, "files, directories or - (stdin) holding legacy objects (YAML or JSON, several documents, List objects)")
	f.BoolVarP(&m.recursive, "recursive", "R", false, "read the directories given with -f recursively")
	f.BoolVar(&m.fromCluster, "from-cluster", false, "read the legacy objects from the cluster (-n namespace, -A all namespaces)")
	f.BoolVarP(&m.allNamespaces, "all-namespaces", "A", false, "with --from-cluster: every namespace")
	f.StringVarP(&m.output, "output", "o", "yaml", "yaml, json, or a directory (ending in /) to write one YAML file per object into")
	f.BoolVar(&m.apply, "apply", false, "apply the result with server-side apply (after a server dry run of every object)")
	f.StringVar(&m.dryRun, "dry-run", "none", `with --apply: "server" stops after the server dry run`)
	f.BoolVar(&m.deleteOld, "delete-old", false, "with --apply: delete the legacy objects afterwards (what they owned is kept)")
	f.StringVar(&m.fieldManager, "field-manager", "kagenti-migrate", "field manager of the server-side apply")
	f.BoolVar(&m.forceConflicts, "force-conflicts", false, "with --apply: take over fields another manager set to other values")
	f.StringVar(&m.distribution, "distribution", migrate.DistributionKubernetes, "where the kagenti-operator ran (kubernetes or openshift): the pod security defaults it added differ")
	f.BoolVar(&m.strict, "strict", false, "fail when anything could not be migrated")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"yaml", "json"}, cobra.ShellCompDirectiveFilterDirs
	})
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions([]string{"none", "server"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("distribution", cobra.FixedCompletions([]string{migrate.DistributionKubernetes, migrate.DistributionOpenShift}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (m *migrateOptions) validate() error {
	switch {
	case len(m.files) == 0 && !m.fromCluster:
		return errors.New("give the legacy objects with -f (files, directories, - for stdin) or --from-cluster")
	case len(m.files) > 0 && m.fromCluster:
		return errors.New("-f and --from-cluster exclude each other")
	case m.allNamespaces && !m.fromCluster:
		return errors.New("-A applies to --from-cluster")
	case m.dryRun != "none" && m.dryRun != "server":
		return fmt.Errorf(`--dry-run=%s: must be "none" or "server" (a client-side dry run is what migrate without --apply prints)`, m.dryRun)
	case m.dryRun == "server" && !m.apply:
		return errors.New("--dry-run=server applies to --apply")
	case m.deleteOld && !m.apply:
		return errors.New("--delete-old applies to --apply")
	case m.deleteOld && m.dryRun == "server":
		return errors.New("--delete-old deletes nothing with --dry-run=server; leave one of them out")
	}
	return nil
}

func (m *migrateOptions) run(cmd *cobra.Command) error {
	if err := m.validate(); err != nil {
		return err
	}
	ctx := cmd.Context()
	var inputs []migrate.Input
	opts := migrate.Options{Distribution: m.distribution}
	if m.fromCluster {
		c, err := m.clients()
		if err != nil {
			return err
		}
		ns := ""
		if !m.allNamespaces {
			if ns, _, err = m.namespace(); err != nil {
				return err
			}
		}
		if inputs, opts.Live, err = apply.ReadLegacy(ctx, c, ns); err != nil {
			return err
		}
	} else {
		docs, err := manifest.Read(m.files, m.recursive, m.streams.In)
		if err != nil {
			return err
		}
		inputs = migrate.FromDocuments(docs)
		if ns, explicit, err := m.namespace(); err == nil && explicit {
			opts.Namespace = ns
		}
	}
	if len(inputs) == 0 {
		return errors.New("no legacy objects found")
	}
	res, err := migrate.Migrate(inputs, opts)
	if err != nil {
		return err
	}
	if err := migrate.WriteReport(m.streams.ErrOut, res.Findings); err != nil {
		return err
	}
	if m.apply {
		c, err := m.clients()
		if err != nil {
			return err
		}
		a := &apply.Applier{Clients: c, FieldManager: m.fieldManager, ForceConflicts: m.forceConflicts}
		if err := a.ApplyMigration(ctx, res, apply.MigrationOptions{DeleteOld: m.deleteOld, DryRunOnly: m.dryRun == "server", Out: m.streams.Out}); err != nil {
			return err
		}
	} else if err := m.write(res); err != nil {
		return err
	}
	if m.strict && len(res.Findings) > 0 {
		return &ExitError{Code: 1, Message: fmt.Sprintf("--strict: %d finding(s) not migrated (listed above)", len(res.Findings))}
	}
	return nil
}

func (m *migrateOptions) write(res *migrate.Result) error {
	switch {
	case m.output == "yaml":
		return migrate.WriteYAML(m.streams.Out, res.Objects)
	case m.output == "json":
		return migrate.WriteJSON(m.streams.Out, res.Objects)
	case strings.HasSuffix(m.output, "/") || isDir(m.output):
		paths, err := migrate.WriteDir(m.output, res.Objects)
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintln(m.streams.Out, p)
		}
		return nil
	default:
		return fmt.Errorf("-o %s: yaml, json, or a directory ending in /", m.output)
	}
}

func isDir(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}
