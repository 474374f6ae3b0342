package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Credentials are what basaltctl needs to reach a cluster's API: its URL,
// the cluster CA that signs the nodes' certificates, and a token. The
// credentials file (like a kubeconfig) holds them as JSON, mode 0600:
//
//	{"api": "https://127.0.0.1:9420", "ca_file": "/abs/path/ca.crt", "token": "basalt_..."}
type Credentials struct {
	API    string `json:"api"`
	CAFile string `json:"ca_file,omitempty"`
	Token  string `json:"token,omitempty"`
}

// The environment variables basaltctl reads.
const (
	// EnvCredentials names the credentials file.
	EnvCredentials = "BASALT_CREDENTIALS"
	// EnvToken, EnvAPI and EnvCA override one field each.
	EnvToken = "BASALT_TOKEN"
	EnvAPI   = "BASALT_API"
	EnvCA    = "BASALT_CA"
)

// DefaultAPI is the API URL when nothing names one.
const DefaultAPI = "https://127.0.0.1:9420"

// DefaultCredentialsPath returns ~/.config/basalt/credentials.json under
// home.
func DefaultCredentialsPath(home string) string {
	return filepath.Join(home, ".config", "basalt", "credentials.json")
}

// maxCredentialsFile bounds the size of a credentials file.
const maxCredentialsFile = 64 << 10

// ParseCredentials parses a credentials file. Unknown fields are refused
// (a misspelt "tokn" would otherwise be silently ignored); a token must
// look like one.
func ParseCredentials(b []byte) (Credentials, error) {
	var c Credentials
	if len(b) > maxCredentialsFile {
		return c, fmt.Errorf("credentials file of %d bytes: at most %d", len(b), maxCredentialsFile)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Credentials{}, fmt.Errorf("credentials file: %w", err)
	}
	if dec.More() {
		return Credentials{}, errors.New("credentials file: trailing data after the JSON object")
	}
	if c.Token != "" && !strings.HasPrefix(c.Token, TokenPrefix) {
		return Credentials{}, fmt.Errorf("credentials file: the token does not start with %q", TokenPrefix)
	}
	return c, nil
}

// ReadCredentials reads a credentials file. It refuses a file that others
// than its owner may read (as ssh does with keys): the token in it is a
// password. A relative ca_file is taken relative to the file's directory.
func ReadCredentials(path string) (Credentials, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Credentials{}, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Credentials{}, fmt.Errorf("credentials file %s has mode %#o: it holds a token, so only its owner may read it "+
			"(chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, err
	}
	c, err := ParseCredentials(b)
	if err != nil {
		return Credentials{}, fmt.Errorf("%s: %w", path, err)
	}
	if c.CAFile != "" && !filepath.IsAbs(c.CAFile) {
		c.CAFile = filepath.Join(filepath.Dir(path), c.CAFile)
	}
	return c, nil
}

// WriteCredentials writes c to path, mode 0600.
func WriteCredentials(path string, c Credentials) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return WriteFile(path, append(b, '\n'))
}

// Overrides are the fields given on basaltctl's command line; empty ones
// override nothing.
type Overrides struct {
	API, CAFile, Token string
}

// Source says where the credentials came from, for error hints.
type Source struct {
	// File is the credentials file read, "" if none.
	File string
}

// Resolve returns the credentials basaltctl uses:
//
//  1. the file $BASALT_CREDENTIALS names (an error if it cannot be read),
//     else ~/.config/basalt/credentials.json if it exists;
//  2. $BASALT_API, $BASALT_CA and $BASALT_TOKEN override one field each;
//  3. flags (o) override all of them.
//
// With no API from any of these, the API is DefaultAPI. getenv is
// os.Getenv in basaltctl; home is the user's home directory ("" if none).
func Resolve(getenv func(string) string, home string, o Overrides) (Credentials, Source, error) {
	var c Credentials
	var src Source
	switch path := getenv(EnvCredentials); {
	case path != "":
		var err error
		if c, err = ReadCredentials(path); err != nil {
			return Credentials{}, src, fmt.Errorf("$%s: %w", EnvCredentials, err)
		}
		src.File = path
	case home != "":
		path = DefaultCredentialsPath(home)
		dc, err := ReadCredentials(path)
		switch {
		case err == nil:
			c, src.File = dc, path
		case !errors.Is(err, fs.ErrNotExist):
			return Credentials{}, src, err
		}
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.API, getenv(EnvAPI))
	set(&c.CAFile, getenv(EnvCA))
	set(&c.Token, getenv(EnvToken))
	set(&c.API, o.API)
	set(&c.CAFile, o.CAFile)
	set(&c.Token, o.Token)
	if c.API == "" {
		c.API = DefaultAPI
	}
	return c, src, nil
}
