// Package auth holds the management API's credentials: the tokens file a
// node checks bearer tokens against (tokens.json in its security
// directory), the roles a token grants, and the credentials file basaltctl
// reads (credentials.go).
//
// A node never holds a token itself, only its SHA-256: reading a node's
// security directory does not give anyone a token. Tokens are 32 random
// bytes, so a plain hash (no salt, no stretching) is enough: there is no
// dictionary to search.
//
// tokens.json:
//
//	{"tokens": [
//	  {"name": "admin",  "role": "admin",     "sha256": "<64 hex digits: sha256(token)>"},
//	  {"name": "reader", "role": "read-only", "sha256": "..."}
//	]}
package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Role is what a token may do.
type Role string

// The roles.
const (
	// RoleAdmin may read and change everything.
	RoleAdmin Role = "admin"
	// RoleReadOnly may read (every GET) and change nothing.
	RoleReadOnly Role = "read-only"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleReadOnly }

// Allows reports whether a token of role r may do what role need allows.
func (r Role) Allows(need Role) bool { return r == RoleAdmin || r == need }

// TokenPrefix starts every token, so that a leaked one is recognisable (by
// secret scanners too).
const TokenPrefix = "basalt_"

// tokenBytes is the entropy of a token.
const tokenBytes = 32

// maxTokenLen bounds what Lookup hashes: a token is TokenPrefix and the
// 43 characters of 32 bytes in unpadded base64url.
const maxTokenLen = 256

// NewToken returns a new token: TokenPrefix and the unpadded base64url of
// 32 random bytes.
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: drawing a token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Hash returns the hex SHA-256 of a token, as tokens.json stores it.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Entry is one token of tokens.json: its name (for logs and audit; never
// secret), its role, and the hex SHA-256 of the token.
type Entry struct {
	Name   string `json:"name"`
	Role   Role   `json:"role"`
	SHA256 string `json:"sha256"`
}

// File is tokens.json.
type File struct {
	Tokens []Entry `json:"tokens"`
}

// TokensFile is the name of the tokens file in a node's security directory.
const TokensFile = "tokens.json"

// maxTokensFile bounds the size of tokens.json.
const maxTokensFile = 1 << 20

// Identity is who a token belongs to.
type Identity struct {
	Name string
	Role Role
}

// Tokens is a parsed tokens file. It is immutable and safe for concurrent
// use.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	Identity
	sum [sha256.Size]byte
}

// ParseTokens parses tokens.json. Every entry needs a name, a known role
// and a SHA-256 of 64 hex digits; names and hashes are unique.
func ParseTokens(b []byte) (*Tokens, error) {
	if len(b) > maxTokensFile {
		return nil, fmt.Errorf("auth: tokens file of %d bytes: at most %d", len(b), maxTokensFile)
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("auth: tokens file: trailing data after the JSON object")
	}
	t := &Tokens{}
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]bool{}
	for i, e := range f.Tokens {
		var te tokenEntry
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("auth: tokens file: token %d has no name", i)
		case names[e.Name]:
			return nil, fmt.Errorf("auth: tokens file: two tokens are named %q", e.Name)
		case !e.Role.Valid():
			return nil, fmt.Errorf("auth: tokens file: token %q: role %q: want %q or %q", e.Name, e.Role, RoleAdmin, RoleReadOnly)
		}
		if len(e.SHA256) != 2*sha256.Size {
			return nil, fmt.Errorf("auth: tokens file: token %q: sha256 %q: want 64 hex digits", e.Name, e.SHA256)
		}
		if _, err := hex.Decode(te.sum[:], []byte(e.SHA256)); err != nil {
			return nil, fmt.Errorf("auth: tokens file: token %q: sha256 %q: want 64 hex digits", e.Name, e.SHA256)
		}
		if sums[te.sum] {
			return nil, fmt.Errorf("auth: tokens file: token %q has the hash of another token", e.Name)
		}
		names[e.Name], sums[te.sum] = true, true
		te.Identity = Identity{Name: e.Name, Role: e.Role}
		t.entries = append(t.entries, te)
	}
	return t, nil
}

// LoadTokens reads dir/tokens.json.
func LoadTokens(dir string) (*Tokens, error) {
	path := filepath.Join(dir, TokensFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	t, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return t, nil
}

// Len returns the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Lookup returns the identity of a token. It compares the token's hash
// with every entry's in constant time, and always with all of them, so
// that the time it takes says nothing about which hash came close.
func (t *Tokens) Lookup(token string) (Identity, bool) {
	if t == nil || len(token) > maxTokenLen || !strings.HasPrefix(token, TokenPrefix) {
		return Identity{}, false
	}
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], t.entries[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Identity{}, false
	}
	return t.entries[found].Identity, true
}

// Marshal returns f as tokens.json.
func (f File) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteFile writes b to path with mode 0600, through a temporary file
// renamed over it, so that a reader never sees half a file.
func WriteFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}
