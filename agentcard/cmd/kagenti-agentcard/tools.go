package main

import (
	"os"
	"path/filepath"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/spf13/cobra"

	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

func newSignCommand() *cobra.Command {
	var cardPath, keyPath, certPath, out, alg, kid string
	var chain []string
	cmd := &cobra.Command{
		Use:   "sign --card card.json --key svid.key --cert svid.crt [--chain intermediate.crt]",
		Short: "Sign an A2A agent card (JWS, detached RFC 8785 payload, x5c) with an X.509 SVID",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			raw, err := os.ReadFile(cardPath)
			if err != nil {
				return err
			}
			key, err := devca.LoadKey(keyPath)
			if err != nil {
				return err
			}
			certs, err := devca.LoadCerts(certPath)
			if err != nil {
				return err
			}
			for _, c := range chain {
				more, err := devca.LoadCerts(c)
				if err != nil {
					return err
				}
				certs = append(certs, more...)
			}
			signed, err := signature.Sign(raw, signature.SignOptions{Key: key, Chain: certs, KeyID: kid, Algorithm: jose.SignatureAlgorithm(alg)})
			if err != nil {
				return err
			}
			signed = append(signed, '\n')
			if out == "" || out == "-" {
				_, err = os.Stdout.Write(signed)
				return err
			}
			return os.WriteFile(out, signed, 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cardPath, "card", "", "agent card JSON file (required)")
	f.StringVar(&keyPath, "key", "", "PEM private key of the SVID (required)")
	f.StringVar(&certPath, "cert", "", "PEM certificate of the SVID, optionally followed by intermediates (required)")
	f.StringSliceVar(&chain, "chain", nil, "PEM files of further intermediates for x5c")
	f.StringVar(&alg, "alg", "", "JWS alg (default: ES256/384/512 by curve, RS256 for RSA)")
	f.StringVar(&kid, "kid", "", "kid header (default: the SVID's SPIFFE ID)")
	f.StringVarP(&out, "out", "o", "-", "output file")
	for _, r := range []string{"card", "key", "cert"} {
		_ = cmd.MarkFlagRequired(r)
	}
	return cmd
}

func newDevCACommand() *cobra.Command {
	var td, dir string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "dev-ca --trust-domain cluster.local --out-dir DIR",
		Short: "Create a development SPIFFE CA (ca.crt, ca.key; ca.crt doubles as bundle.crt). Not for production",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ca, err := devca.NewCA(td, ttl)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			return devca.WriteFiles(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), ca.Key, ca.Cert)
		},
	}
	cmd.Flags().StringVar(&td, "trust-domain", "cluster.local", "SPIFFE trust domain")
	cmd.Flags().StringVar(&dir, "out-dir", ".", "directory for ca.crt and ca.key")
	cmd.Flags().DurationVar(&ttl, "ttl", 30*24*time.Hour, "validity")
	return cmd
}

func newDevSVIDCommand() *cobra.Command {
	var caCert, caKey, id, outCert, outKey string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "dev-svid --ca-cert ca.crt --ca-key ca.key --spiffe-id spiffe://td/ns/N/sa/S",
		Short: "Issue a development X.509 SVID from a dev CA",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ca, err := devca.LoadCA(caCert, caKey)
			if err != nil {
				return err
			}
			svid, err := ca.NewSVID(id, devca.SVIDOptions{NotAfter: time.Now().Add(ttl)})
			if err != nil {
				return err
			}
			return devca.WriteFiles(outCert, outKey, svid.Key, svid.Chain...)
		},
	}
	f := cmd.Flags()
	f.StringVar(&caCert, "ca-cert", "ca.crt", "CA certificate")
	f.StringVar(&caKey, "ca-key", "ca.key", "CA key")
	f.StringVar(&id, "spiffe-id", "", "SPIFFE ID of the SVID (required)")
	f.StringVar(&outCert, "out-cert", "svid.crt", "certificate output")
	f.StringVar(&outKey, "out-key", "svid.key", "key output")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "validity")
	_ = cmd.MarkFlagRequired("spiffe-id")
	return cmd
}

func newServeSampleCardCommand() *cobra.Command {
	var o sampleServer
	cmd := &cobra.Command{
		Use:   "serve-sample-card --card card.json --listen 127.1.0.1:8081 | --kubeconfig K --namespace agents --selector app=weather-agent",
		Short: "Serve a signed agent card (with ETag) for pods: the local cluster's stand-in for an agent's card endpoint",
		Long: `Serves --card, signed with a fresh SVID from the dev CA, on
fixed --listen addresses or on the IP of every running pod matching --selector (local cluster pods
have loopback IPs). Exits when --parent-pid ends, so stopping the controller stops it too.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return o.run() },
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.listen, "listen", nil, "fixed addresses to serve on")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for --selector mode")
	f.StringVar(&o.namespace, "namespace", "agents", "namespace of the pods (--selector mode)")
	f.StringVar(&o.selector, "selector", "", "label selector of the pods to serve for")
	f.IntVar(&o.port, "port", 8081, "port to serve on each pod IP")
	f.IntVar(&o.parentPID, "parent-pid", 0, "exit when this process ends")
	f.StringVar(&o.caCert, "ca-cert", "", "dev CA certificate; with --ca-key the card is signed by a fresh SVID for --spiffe-id")
	f.StringVar(&o.caKey, "ca-key", "", "dev CA key")
	f.StringVar(&o.spiffeID, "spiffe-id", "spiffe://cluster.local/ns/agents/sa/weather-agent", "SPIFFE ID of the signing SVID")
	f.StringVar(&o.cardPath, "card", "", "agent card JSON file to serve (required)")
	_ = cmd.MarkFlagRequired("card")
	return cmd
}
