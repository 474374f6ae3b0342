package dhchap

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"hash"

	"basalt/pkg/nvme"
)

// MaxHashSize is the largest digest of the supported hash functions
// (SHA-512).
const MaxHashSize = sha512.Size

// HashSize returns the digest length of a hash function, 0 for an unknown
// one.
func HashSize(id nvme.AuthHashID) int {
	switch id {
	case nvme.AuthHashSHA256:
		return sha256.Size
	case nvme.AuthHashSHA384:
		return sha512.Size384
	case nvme.AuthHashSHA512:
		return sha512.Size
	}
	return 0
}

// HashName is the hash function's name as Linux prints it ("hmac(sha256)").
func HashName(id nvme.AuthHashID) string {
	switch id {
	case nvme.AuthHashSHA256:
		return "hmac(sha256)"
	case nvme.AuthHashSHA384:
		return "hmac(sha384)"
	case nvme.AuthHashSHA512:
		return "hmac(sha512)"
	}
	return "unknown"
}

// Hashes lists the supported hash functions in the order the Linux host
// offers them.
var Hashes = []nvme.AuthHashID{nvme.AuthHashSHA256, nvme.AuthHashSHA384, nvme.AuthHashSHA512}

func hashFunc(id nvme.AuthHashID) func() hash.Hash {
	switch id {
	case nvme.AuthHashSHA256:
		return sha256.New
	case nvme.AuthHashSHA384:
		return sha512.New384
	case nvme.AuthHashSHA512:
		return sha512.New
	}
	return nil
}

// newHMAC returns an HMAC with hash id keyed by key; id must be supported.
func newHMAC(id nvme.AuthHashID, key []byte) hash.Hash {
	return hmac.New(hashFunc(id), key)
}

// digest returns H(b).
func digest(id nvme.AuthHashID, b []byte) []byte {
	h := hashFunc(id)()
	h.Write(b)
	return h.Sum(nil)
}
