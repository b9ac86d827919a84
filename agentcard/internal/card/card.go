// Package card parses and validates A2A agent cards (protocol v0.3 and v1.0 shapes) and computes
// their RFC 8785 canonical form, which is both the signed payload and the basis of the card hash.
package card

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Size bounds. A card larger than MaxBytes is rejected; the free-form text Card copies out of it
// (for status messages and summaries) is cut to these sizes, so no single field of a card can
// make a status write or an API answer grow with it.
const (
	// MaxBytes is the largest card accepted (the fetcher reads no more either).
	MaxBytes = 1 << 20
	// MaxNameBytes bounds names, versions, skill ids and tags copied out of a card.
	MaxNameBytes = 256
	// MaxDescriptionBytes bounds descriptions copied out of a card.
	MaxDescriptionBytes = 1024
)

// Card is a parsed agent card: the raw JSON object plus the few fields the controller reads.
type Card struct {
	// Raw is the card exactly as served (a JSON object).
	Raw json.RawMessage
	// Object is Raw decoded.
	Object map[string]any
	// Name, Version and Description are copied from the card, cut to MaxNameBytes and
	// MaxDescriptionBytes; unset ones are "".
	Name, Version, Description string
	// Skills are the skill ids, names and tags (each cut to MaxNameBytes); SkillTags the union of
	// skill tags.
	Skills []Skill
	// Signatures are the card's A2A signatures[] entries.
	Signatures []Signature
	// Payload is the RFC 8785 canonical form of the card without "signatures": the signed bytes.
	Payload []byte
	// Hash is the hex SHA-256 of Payload.
	Hash string
}

// Skill is one entry of the card's skills.
type Skill struct {
	ID   string   `json:"id"`
	Name string   `json:"name"`
	Tags []string `json:"tags,omitempty"`
}

// Signature is one A2A AgentCardSignature (a JWS in JSON serialization with a detached payload).
type Signature struct {
	// Protected is the base64url-encoded protected header.
	Protected string `json:"protected"`
	// Signature is the base64url-encoded signature.
	Signature string `json:"signature"`
	// Header is the unprotected header (not trusted for anything).
	Header map[string]any `json:"header,omitempty"`
}

// InvalidError says which card field is wrong.
type InvalidError struct {
	Field   string
	Message string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Parse decodes and validates raw as an A2A agent card. Errors are *InvalidError.
func Parse(raw []byte) (*Card, error) {
	if len(raw) > MaxBytes {
		return nil, invalid("", "the card is %d bytes, more than the limit of %d", len(raw), MaxBytes)
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, invalid("", "not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, invalid("", "trailing data after the JSON object")
	}
	if obj == nil {
		return nil, invalid("", "not a JSON object: null")
	}
	if err := Validate(obj); err != nil {
		return nil, err
	}
	c := &Card{Raw: append(json.RawMessage(nil), raw...), Object: obj}
	c.Name = Truncate(str(obj["name"]), MaxNameBytes)
	c.Version = Truncate(str(obj["version"]), MaxNameBytes)
	c.Description = Truncate(str(obj["description"]), MaxDescriptionBytes)
	for _, s := range asSlice(obj["skills"]) {
		m := s.(map[string]any)
		sk := Skill{ID: Truncate(str(m["id"]), MaxNameBytes), Name: Truncate(str(m["name"]), MaxNameBytes)}
		for _, t := range asSlice(m["tags"]) {
			sk.Tags = append(sk.Tags, Truncate(t.(string), MaxNameBytes))
		}
		c.Skills = append(c.Skills, sk)
	}
	if sigs := asSlice(obj["signatures"]); sigs != nil {
		b, _ := json.Marshal(sigs)
		if err := json.Unmarshal(b, &c.Signatures); err != nil {
			return nil, invalid("signatures", "not a list of JWS signatures: %v", err)
		}
	}
	payload, err := CanonicalPayload(obj)
	if err != nil {
		return nil, invalid("", "cannot canonicalize: %v", err)
	}
	c.Payload = payload
	sum := sha256.Sum256(payload)
	c.Hash = hex.EncodeToString(sum[:])
	return c, nil
}

// CanonicalPayload returns the RFC 8785 (JCS) form of obj without its "signatures" member: the
// payload A2A signatures sign.
func CanonicalPayload(obj map[string]any) ([]byte, error) {
	clean := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "signatures" {
			clean[k] = v
		}
	}
	b, err := json.Marshal(clean)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

// Validate checks a decoded card against the A2A AgentCard definition (protocol v0.3 with a
// top-level url, or v1.0 with supportedInterfaces[]), never more strictly than the specification.
//
// Fields are read as ProtoJSON reads them, the serialization the A2A specification prescribes: a
// string or list that is absent, null, "" or [] is unset, and the specification itself shows
// unset REQUIRED fields (an empty description, no skills) in valid cards, so the SDKs write them
// ("version": "" and "protocolVersion": "" from a2a-go). Unset is an error only where the card
// would be unusable: name, the endpoint (url, or each interface's url and transport) and each
// skill's id. capabilities, a message with presence, must be an object. A field of the wrong JSON
// type is always an error. URLs must fit their transport: an absolute URL, or for GRPC also a gRPC
// target such as host:port.
func Validate(obj map[string]any) error {
	if err := requireText(obj, "name"); err != nil {
		return err
	}
	for _, f := range []string{"description", "version", "protocolVersion"} {
		if _, err := optionalString(obj, f); err != nil {
			return err
		}
	}
	if c, present := obj["capabilities"]; !present || c == nil {
		return invalid("capabilities", "required")
	} else if _, ok := c.(map[string]any); !ok {
		return invalid("capabilities", "must be an object")
	}
	for _, f := range []string{"defaultInputModes", "defaultOutputModes"} {
		if err := optionalStringList(obj, f); err != nil {
			return err
		}
	}
	if err := validateEndpoints(obj); err != nil {
		return err
	}
	if err := validateSkills(obj); err != nil {
		return err
	}
	return validateSignatures(obj)
}

// validateEndpoints checks where the agent is reached: v1.0 supportedInterfaces[] when present,
// otherwise the v0.3 url with preferredTransport (default JSONRPC) and additionalInterfaces[].
func validateEndpoints(obj map[string]any) error {
	if ifaces, present := obj["supportedInterfaces"]; present && ifaces != nil {
		list, ok := ifaces.([]any)
		if !ok || len(list) == 0 {
			return invalid("supportedInterfaces", "must be a non-empty list")
		}
		return validateInterfaces("supportedInterfaces", list, "protocolBinding")
	}
	transport, err := optionalString(obj, "preferredTransport")
	if err != nil {
		return err
	}
	if transport == "" {
		transport = TransportJSONRPC
	}
	if err := requireEndpointURL(obj, "url", transport); err != nil {
		return err
	}
	list, err := optionalList(obj, "additionalInterfaces")
	if err != nil {
		return err
	}
	return validateInterfaces("additionalInterfaces", list, "transport")
}

func validateInterfaces(field string, list []any, transportKey string) error {
	return eachObject(field, list, func(m map[string]any) error {
		if err := requireText(m, transportKey); err != nil {
			return err
		}
		if err := requireEndpointURL(m, "url", m[transportKey].(string)); err != nil {
			return err
		}
		_, err := optionalString(m, "protocolVersion")
		return err
	})
}

func validateSkills(obj map[string]any) error {
	return eachListed(obj, "skills", func(m map[string]any) error {
		if err := requireText(m, "id"); err != nil {
			return err
		}
		for _, f := range []string{"name", "description"} {
			if _, err := optionalString(m, f); err != nil {
				return err
			}
		}
		for _, f := range []string{"tags", "examples", "inputModes", "outputModes"} {
			if err := optionalStringList(m, f); err != nil {
				return err
			}
		}
		return nil
	})
}

func validateSignatures(obj map[string]any) error {
	return eachListed(obj, "signatures", func(m map[string]any) error {
		for _, f := range []string{"protected", "signature"} {
			if err := requireText(m, f); err != nil {
				return err
			}
		}
		if h, present := m["header"]; present && h != nil {
			if _, ok := h.(map[string]any); !ok {
				return invalid("header", "must be an object")
			}
		}
		return nil
	})
}

// optionalList returns the list at field; absent or null is none.
func optionalList(obj map[string]any, field string) ([]any, error) {
	v, present := obj[field]
	if !present || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, invalid(field, "must be a list")
	}
	return list, nil
}

// eachListed runs check on every object of the list at field; absent or null is none.
func eachListed(obj map[string]any, field string, check func(map[string]any) error) error {
	list, err := optionalList(obj, field)
	if err != nil {
		return err
	}
	return eachObject(field, list, check)
}

// eachObject runs check on every element of the list at field, which must be an object; an error
// names the element (field[i]).
func eachObject(field string, list []any, check func(map[string]any) error) error {
	for i, it := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		m, ok := it.(map[string]any)
		if !ok {
			return invalid(f, "must be an object")
		}
		if err := check(m); err != nil {
			return prefix(f, err)
		}
	}
	return nil
}

func prefix(p string, err error) error {
	if ie, ok := err.(*InvalidError); ok {
		return &InvalidError{Field: p + "." + ie.Field, Message: ie.Message}
	}
	return err
}

// optionalString returns the string at field; absent or null is "".
func optionalString(obj map[string]any, field string) (string, error) {
	v, present := obj[field]
	if !present || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", invalid(field, "must be a string")
	}
	return s, nil
}

// requireText fails unless field is a string with more than white space.
func requireText(obj map[string]any, field string) error {
	s, err := optionalString(obj, field)
	if err != nil {
		return err
	}
	if strings.TrimSpace(s) == "" {
		return invalid(field, "required")
	}
	return nil
}

// optionalStringList fails when field is set to anything but a list of strings.
func optionalStringList(obj map[string]any, field string) error {
	v, present := obj[field]
	if !present || v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return invalid(field, "must be a list of strings")
	}
	for i, it := range list {
		if _, ok := it.(string); !ok {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "must be a string")
		}
	}
	return nil
}

// The transports the A2A specification defines; others (custom bindings) are allowed too.
const (
	TransportJSONRPC  = "JSONRPC"
	TransportGRPC     = "GRPC"
	TransportHTTPJSON = "HTTP+JSON"
)

// requireEndpointURL checks that field holds an address a client of transport can use: an
// absolute URL, or for gRPC also a dial target (host:port, dns:///host:port), which is what
// gRPC clients such as a2a-go's take.
func requireEndpointURL(obj map[string]any, field, transport string) error {
	if err := requireText(obj, field); err != nil {
		return err
	}
	s := obj[field].(string)
	quoted := strconv.Quote(Truncate(s, MaxNameBytes))
	if strings.EqualFold(transport, TransportGRPC) {
		if isGRPCTarget(s) {
			return nil
		}
		return invalid(field, "must be a gRPC target (host:port) or an absolute URL for transport %s, got %s", transport, quoted)
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		return nil
	}
	if isGRPCTarget(s) {
		return invalid(field, "must be an absolute URL for transport %s, got %s (host:port is a gRPC target: is the transport GRPC?)", transport, quoted)
	}
	return invalid(field, "must be an absolute URL for transport %s, got %s", transport, quoted)
}

// isGRPCTarget accepts what grpc.NewClient dials: host:port, or a resolver URI (dns:///host:port,
// unix:///path) or absolute URL.
func isGRPCTarget(s string) bool {
	if strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	if host, port, err := net.SplitHostPort(s); err == nil && host != "" && !strings.Contains(host, "/") {
		if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
			return true
		}
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && (u.Host != "" || strings.TrimPrefix(u.Path, "/") != "")
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// Truncate cuts s to at most max bytes on a UTF-8 boundary, marking a cut with "…".
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// SkillTags returns the union of the skills' tags.
func (c *Card) SkillTags() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range c.Skills {
		for _, t := range s.Tags {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}
