package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// maxReviewSize bounds the body read: two objects of at most 3 MiB each (the API server's limit
// for a stored object), and the rest of the AdmissionReview (controller-runtime's bound too).
const maxReviewSize = 7 << 20

// maxPooledReview is the largest buffer kept for reuse: an AdmissionReview of a workload, and the
// answer to it, are a few KB; an unusually large one does not stay pinned in the pool.
const maxPooledReview = 256 << 10

// reviewBuffers hold a request body, then the answer written from it: one per admission in flight.
var reviewBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// HTTPHandler returns the http.Handler served at Path for h, recovering from panics.
func HTTPHandler(h admission.Handler) *ReviewHandler {
	return &ReviewHandler{Handler: h}
}

// ReviewHandler reads the AdmissionReview (admission.k8s.io/v1, or v1beta1, answered in the version
// asked), calls the Handler, and writes the AdmissionReview answer, as controller-runtime's
// admission.Webhook does. Unlike it, the body is read into a buffer reused across admissions and the
// answer is written into the same buffer, the patch base64-encoded in place, instead of encoding/json
// allocating the base64 text and its own buffer: that was a quarter of the bytes allocated per
// admission (docs/benchmarks.md).
type ReviewHandler struct {
	Handler admission.Handler
	// RecoverPanic: nil or true answers a panic of the Handler with an error; false lets it through
	// (the fuzz target, so that a panic fails it).
	RecoverPanic *bool
}

// ServeHTTP answers one AdmissionReview.
func (s *ReviewHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	buf := reviewBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledReview {
			reviewBuffers.Put(buf)
		}
	}()
	buf.Reset()

	review, status, err := readReview(r, buf)
	if err != nil {
		s.write(w, buf, reviewTypeMeta(nil), admission.Errored(status, err))
		return
	}
	req := admission.Request{AdmissionRequest: *review.Request}
	patch := patchBuffers.Get().(*bytes.Buffer)
	defer func() {
		if patch.Cap() <= maxPooledPatch {
			patchBuffers.Put(patch)
		}
	}()
	resp := s.handle(r.Context(), req, patch)
	s.write(w, buf, reviewTypeMeta(&review.TypeMeta), resp)
}

// readReview reads and decodes the AdmissionReview of r into buf; status is the code to answer an
// error with.
func readReview(r *http.Request, buf *bytes.Buffer) (review *admissionv1.AdmissionReview, status int32, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, http.StatusBadRequest, errors.New("request body is empty")
	}
	defer r.Body.Close()
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, maxReviewSize+1)); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err)
	}
	if buf.Len() > maxReviewSize {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request entity is too large; limit is %d bytes", maxReviewSize)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return nil, http.StatusBadRequest, fmt.Errorf("contentType=%s, expected application/json", ct)
	}
	review = &admissionv1.AdmissionReview{}
	if err := decode(buf.Bytes(), review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	switch {
	case review.Kind != "" && review.Kind != "AdmissionReview":
		return nil, http.StatusBadRequest, fmt.Errorf("kind %q, expected AdmissionReview", review.Kind)
	case review.APIVersion != "" && review.APIVersion != admissionv1.SchemeGroupVersion.String() && review.APIVersion != "admission.k8s.io/v1beta1":
		return nil, http.StatusBadRequest, fmt.Errorf("apiVersion %q, expected admission.k8s.io/v1 or v1beta1", review.APIVersion)
	case review.Request == nil:
		return nil, http.StatusBadRequest, errors.New("the AdmissionReview carries no request")
	}
	return review, 0, nil
}

// reviewTypeMeta is the type of the answer: the request's version (v1beta1 has the same shape), v1
// when the request named none or could not be read.
func reviewTypeMeta(req *metav1.TypeMeta) metav1.TypeMeta {
	if req != nil && req.APIVersion != "" {
		return metav1.TypeMeta{APIVersion: req.APIVersion, Kind: "AdmissionReview"}
	}
	return metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
}

// handle calls the handler and completes its response (UID, status code, patches left to encode);
// a panic is answered with an error.
//
// The injector's own *Handler encodes its patch into patch (pooled by ServeHTTP, reused once the
// answer is written); any other admission.Handler allocates its own.
func (s *ReviewHandler) handle(ctx context.Context, req admission.Request, patch *bytes.Buffer) (resp admission.Response) {
	defer func() {
		if s.RecoverPanic != nil && !*s.RecoverPanic {
			return
		}
		if p := recover(); p != nil {
			for _, fn := range utilruntime.PanicHandlers {
				fn(ctx, p)
			}
			resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("panic: %v [recovered]", p))
			resp.UID = req.UID
		}
	}()
	if h, ok := s.Handler.(*Handler); ok {
		resp = h.handleInto(req, patch)
	} else {
		resp = s.Handler.Handle(ctx, req)
	}
	if err := resp.Complete(req); err != nil {
		resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the response: %w", err))
		resp.UID = req.UID
	}
	return resp
}

// responseTail is what the answer holds after uid, allowed and the patch, encoded by encoding/json.
type responseTail struct {
	Result           *metav1.Status    `json:"status,omitempty"`
	AuditAnnotations map[string]string `json:"auditAnnotations,omitempty"`
	Warnings         []string          `json:"warnings,omitempty"`
}

// write answers resp in an AdmissionReview of type tm, written into buf and from there to w. The
// document has the fields encoding/json writes for the admissionv1.AdmissionReview, the patch
// base64-encoded in place (TestHTTPHandlerAnswersAsControllerRuntime decodes both alike).
func (s *ReviewHandler) write(w http.ResponseWriter, buf *bytes.Buffer, tm metav1.TypeMeta, resp admission.Response) {
	buf.Reset()
	encode := jsonInto(buf)
	buf.WriteString(`{"kind":`)
	_ = encode(tm.Kind) // a string: encoding cannot fail
	buf.WriteString(`,"apiVersion":`)
	_ = encode(tm.APIVersion)
	buf.WriteString(`,"response":{"uid":`)
	_ = encode(string(resp.UID))
	if resp.Allowed {
		buf.WriteString(`,"allowed":true`)
	} else {
		buf.WriteString(`,"allowed":false`)
	}
	if len(resp.Patch) > 0 {
		buf.WriteString(`,"patch":"`)
		n := base64.StdEncoding.EncodedLen(len(resp.Patch))
		buf.Grow(n)
		text := buf.AvailableBuffer()[:n]
		base64.StdEncoding.Encode(text, resp.Patch)
		buf.Write(text) // text is buf's own spare room: no copy to another buffer, no growth
		buf.WriteByte('"')
	}
	if resp.PatchType != nil {
		buf.WriteString(`,"patchType":`)
		_ = encode(string(*resp.PatchType))
	}
	tail := buf.Len()
	if err := encode(responseTail{Result: resp.Result, AuditAnnotations: resp.AuditAnnotations, Warnings: resp.Warnings}); err != nil {
		http.Error(w, fmt.Sprintf("encoding the AdmissionReview answer: %v", err), http.StatusInternalServerError)
		return
	}
	// The tail's fields continue the response object: its "{" becomes a comma, or goes when empty.
	if buf.Len()-tail == len("{}") {
		buf.Truncate(tail)
		buf.WriteString("}}")
	} else {
		buf.Bytes()[tail] = ','
		buf.WriteByte('}')
	}
	buf.WriteByte('\n') // as json.Encoder ends the document controller-runtime writes
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}
