package authconfig

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// resolveEgress makes the egress policy explicit: the default Allow when unset, an agent rule its
// Service's four names (namespace defaulting to the workload's).
func resolveEgress(e EgressSpec, namespace string) Egress {
	out := Egress{Default: str(EgressAllowAll, e.Default), DryRun: value(e.DryRun), Allow: make([]EgressAllow, 0, len(e.Allow))}
	for _, r := range e.Allow {
		a := EgressAllow{Hosts: []string{}, CIDR: r.CIDR, Ports: nonNil(r.Ports)}
		switch {
		case r.Host != "":
			a.Hosts = []string{strings.ToLower(r.Host)}
		case r.Agent != nil:
			a.Hosts = AgentServiceNames(r.Agent.Name, str(namespace, r.Agent.Namespace))
		}
		out.Allow = append(out.Allow, a)
	}
	return out
}

// AgentServiceNames are the names an agent's Service answers to inside the cluster.
func AgentServiceNames(name, namespace string) []string {
	return []string{name, name + "." + namespace, name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local"}
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// validateEgress checks the policy as config.yaml states it, each problem with its path there.
func validateEgress(e EgressSpec) []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("outbound.egress.%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if e.Default != "" && e.Default != EgressAllowAll && e.Default != EgressDeny {
		add("default", "%q is not Allow or Deny", e.Default)
	}
	for i, r := range e.Allow {
		path := fmt.Sprintf("allow[%d]", i)
		set := 0
		for _, b := range []bool{r.Host != "", r.CIDR != "", r.Agent != nil} {
			if b {
				set++
			}
		}
		if set != 1 {
			add(path, "exactly one of host, cidr and agent must be set (%d are)", set)
		}
		if r.Host != "" {
			if !hostPattern.MatchString(r.Host) || len(r.Host) > 253 {
				add(path+".host", "%q is not a host pattern (letters, digits, '-', '.', '*', optional :port)", r.Host)
			} else if strings.Contains(r.Host, ":") && len(r.Ports) > 0 {
				add(path+".ports", "a host with :port (%q) and ports together: name the ports in one place", r.Host)
			}
		}
		if r.CIDR != "" {
			if _, err := netip.ParsePrefix(r.CIDR); err != nil {
				add(path+".cidr", "%q is not a CIDR (such as 10.0.0.0/8 or 2001:db8::/32)", r.CIDR)
			}
		}
		if r.Agent != nil {
			if !dnsLabel.MatchString(r.Agent.Name) || len(r.Agent.Name) > 63 {
				add(path+".agent.name", "%q is not a Service name (a DNS label)", r.Agent.Name)
			}
			if ns := r.Agent.Namespace; ns != "" && (!dnsLabel.MatchString(ns) || len(ns) > 63) {
				add(path+".agent.namespace", "%q is not a namespace name (a DNS label)", ns)
			}
		}
		for j, p := range r.Ports {
			if p < 1 || p > 65535 {
				add(fmt.Sprintf("%s.ports[%d]", path, j), "%d is not a port (1-65535)", p)
			}
		}
	}
	return errs
}
