package pki

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxPEMFile bounds what a load reads from one file: a certificate or key
// is a few hundred bytes.
const maxPEMFile = 1 << 20

// file is one file writeFiles writes.
type file struct {
	name string
	data []byte
	mode os.FileMode
}

// MissingFiles lists the paths of the files a node's security directory
// must hold for LoadNode (ca.crt, node.crt, node.key) that do not exist.
func MissingFiles(dir string) []string {
	var missing []string
	for _, name := range []string{CACertFile, NodeCertFile, NodeKeyFile} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	return missing
}

// readPEM reads the single PEM block of type typ (or, for keys, one of
// types) that the file holds, refusing trailing data, other block types and
// files over maxPEMFile.
func readPEM(path string, types ...string) (*pem.Block, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("pki: %s: no PEM block", path)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("pki: %s: data after the first PEM block", path)
	}
	for _, t := range types {
		if block.Type == t {
			return block, nil
		}
	}
	return nil, fmt.Errorf("pki: %s: PEM block %q, want %s", path, block.Type, strings.Join(types, " or "))
}

// readBounded reads a file of at most maxPEMFile bytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if st.Size() > maxPEMFile {
		return nil, fmt.Errorf("pki: %s: %d bytes, more than a certificate or key", path, st.Size())
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	return data, nil
}

// readCert reads a PEM certificate file and returns its DER.
func readCert(path string) ([]byte, error) {
	block, err := readPEM(path, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	return block.Bytes, nil
}

// readKey reads a PEM private key (PKCS #8 or SEC 1) that only its owner
// may read.
func readKey(path string) (crypto.Signer, error) {
	block, err := readKeyBlock(path)
	if err != nil {
		return nil, err
	}
	return parseKey(path, block)
}

// readKeyBlock reads a key file's PEM block, refusing a file that group or
// others may read.
func readKeyBlock(path string) (*pem.Block, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("pki: %s: mode %v lets others read the key; want 0600 (chmod 600 %s)",
			path, st.Mode().Perm(), path)
	}
	return readPEM(path, "PRIVATE KEY", "EC PRIVATE KEY")
}

// parseKey decodes a PEM key block into a signer.
func parseKey(path string, block *pem.Block) (crypto.Signer, error) {
	if block.Type == "EC PRIVATE KEY" {
		k, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: %s: %w", path, err)
		}
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: %s: key of type %T cannot sign", path, k)
	}
	return s, nil
}

// encodeKey writes a key as PEM "PRIVATE KEY" (PKCS #8).
func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeFiles creates dir (0700) and writes each file atomically, in order.
func writeFiles(dir string, files []file) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return syncDir(dir)
}

// writeAtomic writes data to a temporary file beside path with mode, syncs
// it and renames it over path: a reader sees the old file or the new one.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	ok = true
	return nil
}

// syncDir makes a directory's entries (renames) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
