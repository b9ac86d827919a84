package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// MaxRPCBody bounds the request body the proxy reads to find the JSON-RPC method of an A2A
// request, which it does only when the policy decides on request.rpcMethod. A2A messages carry
// parts inline, so the bound is well above a typical request; the memory it costs is per request
// of an authenticated caller.
const MaxRPCBody = 1 << 20

// bodyError is a body from which the JSON-RPC method cannot be read safely: the request is
// refused (with Status), because a policy deciding on the method must not be bypassed by a body
// the agent reads differently from the proxy.
type bodyError struct {
	Status int
	Reason string
}

func (e *bodyError) Error() string { return e.Reason }

// readRPCMethod returns the JSON-RPC method of r's body and puts the body back for the agent,
// unchanged. A gRPC request (Content-Type application/grpc…) is not read and has no method. A
// body that is no JSON object (form data, text, a JSON string) has no method: "".
// Refused, with a *bodyError: a body larger than MaxRPCBody or content-encoded (it cannot be read
// here), a batch (an array: A2A has none, and it could carry several methods), malformed JSON or
// JSON that is not UTF-8 (a byte-order mark, UTF-16/32, invalid bytes), a method given twice or in
// another case (parsers disagree on which one counts), and data after the object.
func readRPCMethod(r *http.Request) (string, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return "", nil
	}
	if ct := strings.ToLower(r.Header.Get("Content-Type")); strings.HasPrefix(ct, "application/grpc") {
		// A gRPC stream is read by the agent as protobuf frames, never as JSON-RPC, and it may
		// stay open for the life of the call: it is not read here.
		return "", nil
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return "", &bodyError{http.StatusUnsupportedMediaType, fmt.Sprintf("request body with Content-Encoding %q: the authorization policy decides on the JSON-RPC method and reads it from the body", ce)}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRPCBody+1))
	if err != nil {
		return "", &bodyError{http.StatusBadRequest, "reading the request body: " + err.Error()}
	}
	if len(body) > MaxRPCBody {
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		return "", &bodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes: the authorization policy decides on the JSON-RPC method and reads it from the body", MaxRPCBody)}
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	method, err := rpcMethodOf(body)
	if err != nil {
		return "", &bodyError{http.StatusBadRequest, err.Error()}
	}
	return method, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// rpcMethodOf reads the method member of a JSON-RPC request object (see readRPCMethod).
func rpcMethodOf(body []byte) (string, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return "", nil
	case bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")), bytes.HasPrefix(body, []byte("\xFE\xFF")), bytes.HasPrefix(body, []byte("\xFF\xFE")):
		return "", errors.New("request body starts with a byte-order mark: JSON must be UTF-8 without one (RFC 8259 §8.1)")
	case len(body) >= 2 && (body[0] == 0 || body[1] == 0):
		return "", errors.New("request body looks like UTF-16 or UTF-32: JSON must be UTF-8 (RFC 8259 §8.1)")
	case trimmed[0] == '[':
		return "", errors.New("JSON-RPC batch requests are not accepted: the authorization policy decides on one method per request")
	case trimmed[0] != '{':
		return "", nil // not a JSON-RPC request
	case !utf8.Valid(body):
		return "", errors.New("request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	malformed := func(err error) error { return fmt.Errorf("request body is not a JSON object: %v", err) }
	if _, err := dec.Token(); err != nil { // '{'
		return "", malformed(err)
	}
	method, seen := "", false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", malformed(err)
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return "", malformed(err)
		}
		if !strings.EqualFold(key, "method") {
			continue
		}
		if seen || key != "method" {
			return "", fmt.Errorf("the JSON-RPC method is given twice or as %q: parsers disagree on which one counts", key)
		}
		seen = true
		_ = json.Unmarshal(value, &method) // a method that is no string is none (the agent refuses it)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return "", malformed(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("request body holds more than one JSON value")
	}
	return method, nil
}
