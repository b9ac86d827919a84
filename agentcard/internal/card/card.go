// Package card parses and validates A2A agent cards (protocol v0.3 and v1.0 shapes) and computes
// their RFC 8785 canonical form, which is both the signed payload and the basis of the card hash.
package card

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/gowebpki/jcs"
)

// Card is a parsed agent card: the raw JSON object plus the few fields the controller reads.
type Card struct {
	// Raw is the card exactly as served (a JSON object).
	Raw json.RawMessage
	// Object is Raw decoded.
	Object map[string]any
	// Name, Version and Description are copied from the card.
	Name, Version, Description string
	// Skills are the skill ids and names; SkillTags the union of skill tags.
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
	c.Name, _ = obj["name"].(string)
	c.Version, _ = obj["version"].(string)
	c.Description, _ = obj["description"].(string)
	for _, s := range obj["skills"].([]any) {
		m := s.(map[string]any)
		sk := Skill{}
		sk.ID, _ = m["id"].(string)
		sk.Name, _ = m["name"].(string)
		for _, t := range asSlice(m["tags"]) {
			if ts, ok := t.(string); ok {
				sk.Tags = append(sk.Tags, ts)
			}
		}
		c.Skills = append(c.Skills, sk)
	}
	if sigs, ok := obj["signatures"]; ok {
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

// Validate checks the fields the A2A specification requires. A card with supportedInterfaces is
// read as v1.0 (interfaces carry url and protocolBinding); otherwise as v0.3 (top-level url).
func Validate(obj map[string]any) error {
	for _, f := range []string{"name", "description", "version"} {
		if err := requireString(obj, f, f == "name" || f == "version"); err != nil {
			return err
		}
	}
	if _, ok := obj["capabilities"].(map[string]any); !ok {
		if _, present := obj["capabilities"]; !present {
			return invalid("capabilities", "required")
		}
		return invalid("capabilities", "must be an object")
	}
	for _, f := range []string{"defaultInputModes", "defaultOutputModes"} {
		if err := requireStringList(obj, f); err != nil {
			return err
		}
	}
	if ifaces, present := obj["supportedInterfaces"]; present {
		list, ok := ifaces.([]any)
		if !ok || len(list) == 0 {
			return invalid("supportedInterfaces", "must be a non-empty list")
		}
		for i, it := range list {
			m, ok := it.(map[string]any)
			field := fmt.Sprintf("supportedInterfaces[%d]", i)
			if !ok {
				return invalid(field, "must be an object")
			}
			if err := requireURL(m, field+".url"); err != nil {
				return err
			}
			if err := requireString(m, "protocolBinding", true); err != nil {
				return prefix(field, err)
			}
		}
	} else {
		if err := requireURL(obj, "url"); err != nil {
			return err
		}
		if _, present := obj["protocolVersion"]; present {
			if err := requireString(obj, "protocolVersion", true); err != nil {
				return err
			}
		}
	}
	skills, present := obj["skills"]
	if !present {
		return invalid("skills", "required")
	}
	list, ok := skills.([]any)
	if !ok {
		return invalid("skills", "must be a list")
	}
	for i, s := range list {
		field := fmt.Sprintf("skills[%d]", i)
		m, ok := s.(map[string]any)
		if !ok {
			return invalid(field, "must be an object")
		}
		for _, f := range []string{"id", "name", "description"} {
			if err := requireString(m, f, f != "description"); err != nil {
				return prefix(field, err)
			}
		}
		if err := requireStringList(m, "tags"); err != nil {
			return prefix(field, err)
		}
	}
	if sigs, present := obj["signatures"]; present {
		list, ok := sigs.([]any)
		if !ok {
			return invalid("signatures", "must be a list")
		}
		for i, s := range list {
			field := fmt.Sprintf("signatures[%d]", i)
			m, ok := s.(map[string]any)
			if !ok {
				return invalid(field, "must be an object")
			}
			for _, f := range []string{"protected", "signature"} {
				if err := requireString(m, f, true); err != nil {
					return prefix(field, err)
				}
			}
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

func requireString(obj map[string]any, field string, nonEmpty bool) error {
	v, present := obj[field]
	if !present {
		return invalid(field, "required")
	}
	s, ok := v.(string)
	if !ok {
		return invalid(field, "must be a string")
	}
	if nonEmpty && strings.TrimSpace(s) == "" {
		return invalid(field, "must not be empty")
	}
	return nil
}

func requireStringList(obj map[string]any, field string) error {
	v, present := obj[field]
	if !present {
		return invalid(field, "required")
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

func requireURL(obj map[string]any, field string) error {
	key := field[strings.LastIndex(field, ".")+1:]
	v, present := obj[key]
	if !present {
		return invalid(field, "required")
	}
	s, ok := v.(string)
	if !ok {
		return invalid(field, "must be a string")
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return invalid(field, "must be an absolute URL, got %q", s)
	}
	return nil
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
