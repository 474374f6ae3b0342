package auth

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewTokenShape(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tok, TokenPrefix) {
			t.Fatalf("token %q lacks the prefix", tok)
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, TokenPrefix))
		if err != nil || len(raw) != 32 {
			t.Fatalf("token %q: %d bytes, %v; want 32 bytes of base64url", tok, len(raw), err)
		}
		if seen[tok] {
			t.Fatalf("token %q drawn twice", tok)
		}
		seen[tok] = true
	}
}

func tokensFor(t *testing.T, entries ...Entry) *Tokens {
	t.Helper()
	b, err := File{Tokens: entries}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := ParseTokens(b)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestLookup(t *testing.T) {
	admin, _ := NewToken()
	reader, _ := NewToken()
	other, _ := NewToken()
	tk := tokensFor(t, Entry{Name: "admin", Role: RoleAdmin, SHA256: Hash(admin)},
		Entry{Name: "reader", Role: RoleReadOnly, SHA256: Hash(reader)})
	if id, ok := tk.Lookup(admin); !ok || id != (Identity{"admin", RoleAdmin}) {
		t.Errorf("admin: %v %v", id, ok)
	}
	if id, ok := tk.Lookup(reader); !ok || id != (Identity{"reader", RoleReadOnly}) {
		t.Errorf("reader: %v %v", id, ok)
	}
	for _, bad := range []string{"", other, Hash(admin), admin + "x", admin[:len(admin)-1], strings.Repeat("b", 1<<20),
		strings.TrimPrefix(admin, TokenPrefix)} {
		if id, ok := tk.Lookup(bad); ok {
			t.Errorf("Lookup(%.20q) = %v, want unknown", bad, id)
		}
	}
	var none *Tokens
	if _, ok := none.Lookup(admin); ok {
		t.Error("a nil Tokens knows a token")
	}
}

func TestRoleAllows(t *testing.T) {
	for _, c := range []struct {
		have, need Role
		ok         bool
	}{
		{RoleAdmin, RoleAdmin, true}, {RoleAdmin, RoleReadOnly, true},
		{RoleReadOnly, RoleReadOnly, true}, {RoleReadOnly, RoleAdmin, false},
		{"", RoleReadOnly, false},
	} {
		if got := c.have.Allows(c.need); got != c.ok {
			t.Errorf("%q.Allows(%q) = %v", c.have, c.need, got)
		}
	}
}

func TestParseTokensRefuses(t *testing.T) {
	h := Hash("basalt_x")
	for name, in := range map[string]string{
		"not json":       `{`,
		"unknown field":  `{"tokens":[],"extra":1}`,
		"trailing":       `{"tokens":[]} {}`,
		"no name":        `{"tokens":[{"role":"admin","sha256":"` + h + `"}]}`,
		"bad role":       `{"tokens":[{"name":"a","role":"root","sha256":"` + h + `"}]}`,
		"short hash":     `{"tokens":[{"name":"a","role":"admin","sha256":"abcd"}]}`,
		"non-hex hash":   `{"tokens":[{"name":"a","role":"admin","sha256":"` + strings.Repeat("z", 64) + `"}]}`,
		"long hash":      `{"tokens":[{"name":"a","role":"admin","sha256":"` + h + `00"}]}`,
		"plain token":    `{"tokens":[{"name":"a","role":"admin","token":"basalt_x"}]}`,
		"duplicate name": `{"tokens":[{"name":"a","role":"admin","sha256":"` + h + `"},{"name":"a","role":"read-only","sha256":"` + Hash("y") + `"}]}`,
		"duplicate hash": `{"tokens":[{"name":"a","role":"admin","sha256":"` + h + `"},{"name":"b","role":"read-only","sha256":"` + h + `"}]}`,
	} {
		if _, err := ParseTokens([]byte(in)); err == nil {
			t.Errorf("%s: parsed %s", name, in)
		}
	}
}

func TestLoadTokensNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, TokensFile), []byte(`{"tokens":[{"name":"a"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(dir); err == nil || !strings.Contains(err.Error(), TokensFile) {
		t.Fatalf("err = %v, want one naming the file", err)
	}
	if _, err := LoadTokens(t.TempDir()); err == nil {
		t.Fatal("a missing tokens file loaded")
	}
}

func FuzzParseTokens(f *testing.F) {
	f.Add([]byte(`{"tokens":[{"name":"admin","role":"admin","sha256":"` + Hash("basalt_a") + `"}]}`))
	f.Add([]byte(`{"tokens":[]}`))
	f.Add([]byte(`{"tokens":[{"name":"a","role":"read-only","sha256":"00"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := ParseTokens(b)
		if err != nil {
			return
		}
		for _, e := range tk.entries {
			if e.Name == "" || !e.Role.Valid() {
				t.Fatalf("accepted entry %+v", e.Identity)
			}
		}
		_, _ = tk.Lookup("basalt_a")
	})
}

func FuzzParseCredentials(f *testing.F) {
	f.Add([]byte(`{"api":"https://127.0.0.1:9420","ca_file":"/x/ca.crt","token":"basalt_abc"}`))
	f.Add([]byte(`{"api":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCredentials(b)
		if err == nil && c.Token != "" && !strings.HasPrefix(c.Token, TokenPrefix) {
			t.Fatalf("accepted token %q", c.Token)
		}
	})
}
