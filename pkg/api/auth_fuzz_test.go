package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"basalt/pkg/auth"
)

// FuzzAuthorize: whatever the method, path and Authorization header, a
// request without a known token or a node certificate is denied with 401
// or 403 and a JSON error, never a panic and never a handler.
func FuzzAuthorize(f *testing.F) {
	known, err := auth.NewToken()
	if err != nil {
		f.Fatal(err)
	}
	b, _ := auth.File{Tokens: []auth.Entry{{Name: "admin", Role: auth.RoleAdmin, SHA256: auth.Hash(known)}}}.Marshal()
	tk, err := auth.ParseTokens(b)
	if err != nil {
		f.Fatal(err)
	}
	s := NewServer(Config{Security: &Security{Tokens: tk}})
	f.Add("GET", "/v1/volumes", "")
	f.Add("POST", "/v1/internal/commands", "Bearer basalt_x")
	f.Add("DELETE", "/v1/volumes/a", "bearer  basalt_"+strings.Repeat("A", 43))
	f.Add("GET", "/metrics", "Basic YTpi")
	f.Add("PUT", "/v1/nodes/join", "Bearer")
	f.Fuzz(func(t *testing.T, method, path, authz string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t?#%") || strings.ContainsAny(authz, "\r\n") {
			return
		}
		req, err := http.NewRequest(method, "http://x"+path, nil)
		if err != nil {
			return
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized && w.Code != http.StatusForbidden && w.Code != http.StatusMovedPermanently &&
			w.Code != http.StatusTemporaryRedirect && w.Code != http.StatusPermanentRedirect {
			t.Fatalf("%s %s with %q: %d, want a denial", method, path, authz, w.Code)
		}
		if w.Code >= 400 {
			var e Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Message == "" {
				t.Fatalf("%s %s: the denial is not a JSON error: %s", method, path, w.Body.String())
			}
		}
	})
}

// FuzzParseCSR: a join's certificate request never panics the parser.
func FuzzParseCSR(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if csr, err := parseCSR(b); err == nil && csr == nil {
			t.Fatal("nil CSR without an error")
		}
	})
}
