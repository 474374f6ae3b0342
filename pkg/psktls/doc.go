// Package psktls is a minimal TLS 1.3 server (RFC 8446) that authenticates
// with external pre-shared keys only: the secure channel of NVMe/TCP
// (NVMe/TCP Transport 1.1 §3.6.1.3), where the PSK is derived from a
// configured key and the PSK identity names the host and subsystem.
//
// # Why it is written here
//
// Go's crypto/tls has no API for external PSKs (golang/go#6379) and no
// maintained Go library provides a TLS 1.3 server with them: the candidates
// are a TLS 1.3 draft implementation no longer maintained, a client-side
// fork of crypto/tls, and DTLS-only libraries. Binding a C library (GnuTLS,
// OpenSSL) would bring cgo into the target. What is here is the PSK-only
// subset, built on the standard library's vetted primitives: crypto/hkdf for
// the key schedule, crypto/hmac for binders and Finished (compared in
// constant time), crypto/aes with cipher.NewGCM for the record protection,
// and crypto/ecdh (X25519, P-256, P-384) for psk_dhe_ke.
//
// # What it implements
//
//   - Cipher suites TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384; the
//     hash associated with the PSK selects the suite (RFC 8446 §4.2.11).
//   - Key exchange modes psk_dhe_ke (preferred) and psk_ke; a
//     HelloRetryRequest when the client offers a common group but no share
//     for it.
//   - ClientHello parsing with strict length checks; pre_shared_key must be
//     the last extension, every binder is checked against the selected PSK.
//   - The key schedule of RFC 8446 §7.1, the record layer of §5 (plaintext
//     limit 2^14, padding removed, a KeyUpdate sent before a write key's
//     record limit), alerts, close_notify, KeyUpdate from the peer.
//
// # What it leaves out
//
// Certificates, session tickets (none are sent, so the client has nothing
// to resume), 0-RTT (early data is skipped as §4.2.10 allows, within a
// bound), TLS 1.2 and older, client authentication beyond the PSK, and the
// client side (tests carry a client of their own).
//
// # Wire format
//
// Every record (§5.1) starts with a 5-byte header:
//
//	+------+------------------+----------------+---------------------+
//	| type | legacy_version   | length (BE)    | fragment (length B) |
//	| 1 B  | 2 B (0x0303)     | 2 B            |                     |
//	+------+------------------+----------------+---------------------+
//
// From the server's ServerHello on, fragments are AEAD-protected
// TLSCiphertext of type application_data (23): the sealed
// TLSInnerPlaintext (content || real type || zero padding) and a 16-byte
// tag; the nonce is the write IV XOR the 64-bit record sequence number.
package psktls
