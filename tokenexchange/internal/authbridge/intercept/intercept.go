// Package intercept is the proxy-init role: nftables rules in the pod's network namespace that
// redirect outgoing TCP connections to the outbound proxy and incoming ones to the inbound proxy.
// The rules are built with github.com/google/nftables (netlink, no nft binary) into one table,
// "inet kagenti", replaced atomically, so running it again installs the same rules once.
package intercept

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// TableName is the nftables table of the rules (family inet: IPv4 and IPv6).
const TableName = "kagenti"

// Rules is what to install.
type Rules struct {
	// Outbound redirects new outgoing TCP connections to 127.0.0.1:ProxyPort (or [::1]), except
	// the proxy's own (ProxyUID), those to loopback addresses, and those to OutboundExclude ports.
	Outbound        bool
	ProxyPort       uint16
	ProxyUID        uint32
	OutboundExclude []uint16
	// Inbound redirects incoming TCP connections to InboundPort, except those to InboundExclude
	// ports.
	Inbound        bool
	InboundPort    uint16
	InboundExclude []uint16
}

// RulesFor derives the rules from a configuration. alwaysInbound are ports that are never
// redirected inbound whatever the configuration says: the sidecars' own status and health ports,
// which the kubelet and the controller reach directly.
func RulesFor(c authconfig.Config, alwaysInbound []uint16) Rules {
	r := Rules{
		Outbound:    c.Outbound.Enabled && c.Outbound.Interception.Enabled,
		ProxyPort:   uint16(c.Outbound.Interception.ProxyPort),
		ProxyUID:    uint32(c.Outbound.Interception.ProxyUID),
		Inbound:     c.Inbound.Enabled,
		InboundPort: uint16(c.Inbound.Port),
	}
	for _, p := range c.Outbound.Interception.ExcludePorts {
		r.OutboundExclude = append(r.OutboundExclude, uint16(p))
	}
	r.InboundExclude = append(r.InboundExclude, r.InboundPort)
	r.InboundExclude = append(r.InboundExclude, alwaysInbound...)
	for _, p := range c.Inbound.ExcludePorts {
		r.InboundExclude = append(r.InboundExclude, uint16(p))
	}
	slices.Sort(r.OutboundExclude)
	r.OutboundExclude = slices.Compact(r.OutboundExclude)
	slices.Sort(r.InboundExclude)
	r.InboundExclude = slices.Compact(r.InboundExclude)
	return r
}

// Describe renders r in nft's syntax: what Install puts into the kernel.
func (r Rules) Describe() string {
	if !r.Outbound && !r.Inbound {
		return fmt.Sprintf("# no interception: table inet %s removed\n", TableName)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", TableName)
	if r.Outbound {
		b.WriteString("  chain output {\n    type nat hook output priority dstnat; policy accept;\n")
		b.WriteString("    meta l4proto != tcp return\n")
		fmt.Fprintf(&b, "    meta skuid %d return\n", r.ProxyUID)
		b.WriteString("    ip daddr 127.0.0.0/8 return\n    ip6 daddr ::1 return\n")
		if len(r.OutboundExclude) > 0 {
			fmt.Fprintf(&b, "    tcp dport %s return\n", portSet(r.OutboundExclude))
		}
		fmt.Fprintf(&b, "    redirect to :%d\n  }\n", r.ProxyPort)
	}
	if r.Inbound {
		b.WriteString("  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n")
		b.WriteString("    meta l4proto != tcp return\n")
		if len(r.InboundExclude) > 0 {
			fmt.Fprintf(&b, "    tcp dport %s return\n", portSet(r.InboundExclude))
		}
		fmt.Fprintf(&b, "    redirect to :%d\n  }\n", r.InboundPort)
	}
	b.WriteString("}\n")
	return b.String()
}

func portSet(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprint(p)
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

// Validate checks the ports and UID.
func (r Rules) Validate() error {
	var errs []error
	if r.Outbound && r.ProxyPort == 0 {
		errs = append(errs, errors.New("outbound interception needs the proxy port"))
	}
	if r.Outbound && r.ProxyUID == 0 {
		errs = append(errs, errors.New("outbound interception needs the proxy's non-root UID (root's own traffic would loop)"))
	}
	if r.Inbound && r.InboundPort == 0 {
		errs = append(errs, errors.New("inbound interception needs the inbound port"))
	}
	return errors.Join(errs...)
}

// Install replaces the table with r's rules in one netlink transaction. opts select the network
// namespace (nftables.WithNetNSFd); the default is the caller's.
func Install(r Rules, opts ...nftables.ConnOption) error {
	if err := r.Validate(); err != nil {
		return err
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	// Add, delete, add: creates the table when missing and drops its previous content, in the
	// same transaction as the new rules (the nft idiom for an atomic replace).
	c.AddTable(t)
	c.DelTable(t)
	if r.Outbound || r.Inbound {
		c.AddTable(t)
	}
	if r.Outbound {
		ch := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
		add := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
		add(notTCP()...)
		add(&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(r.ProxyUID)}, ret())
		add(&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}}, ret())
		add(&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: append(make([]byte, 15), 1)}, ret())
		if len(r.OutboundExclude) > 0 {
			if err := excludePorts(c, t, ch, r.OutboundExclude); err != nil {
				return err
			}
		}
		add(redirect(r.ProxyPort)...)
	}
	if r.Inbound {
		ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: notTCP()})
		if len(r.InboundExclude) > 0 {
			if err := excludePorts(c, t, ch, r.InboundExclude); err != nil {
				return err
			}
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: redirect(r.InboundPort)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing nftables rules (needs CAP_NET_ADMIN and a kernel with nf_tables NAT): %w", err)
	}
	return nil
}

// Installed reads back, from the kernel, how many rules each chain of the table holds.
func Installed(opts ...nftables.ConnOption) (map[string]int, error) {
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, err
	}
	t, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return map[string]int{}, nil
		}
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, ch := range chains {
		if ch.Table.Name != t.Name {
			continue
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return nil, err
		}
		out[ch.Name] = len(rules)
	}
	return out, nil
}

func ret() *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictReturn} }

func notTCP() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.IPPROTO_TCP}}, ret()}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

// excludePorts adds "tcp dport { ports } return" with an anonymous constant set.
func excludePorts(c *nftables.Conn, t *nftables.Table, ch *nftables.Chain, ports []uint16) error {
	set := &nftables.Set{Table: t, Anonymous: true, Constant: true, KeyType: nftables.TypeInetService}
	elems := make([]nftables.SetElement, len(ports))
	for i, p := range ports {
		elems[i] = nftables.SetElement{Key: binary.BigEndian.AppendUint16(nil, p)}
	}
	if err := c.AddSet(set, elems); err != nil {
		return err
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		ret(),
	}})
	return nil
}
