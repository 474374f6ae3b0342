package psktls

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Record layer limits and types (RFC 8446 §5).
const (
	recordHeaderLen = 5
	// maxPlaintext is the largest TLSPlaintext / TLSInnerPlaintext content.
	maxPlaintext = 1 << 14
	// maxCiphertext is the largest TLSCiphertext fragment: content, type
	// byte, padding and tag within 2^14 + 256.
	maxCiphertext = maxPlaintext + 256
	nonceSize     = 12
	tagSize       = 16

	typeChangeCipherSpec uint8 = 20
	typeAlert            uint8 = 21
	typeHandshake        uint8 = 22
	typeApplicationData  uint8 = 23
)

// recordLimit is how many records one write key seals before the writer
// moves to the next traffic secret with a KeyUpdate: below the 2^24.5
// full-size records RFC 8446 §5.5 allows AES-GCM.
const recordLimit = 1 << 24

// errRecordOverflow and errBadRecordMAC are the record layer's failures;
// they carry the alert the peer is sent.
var (
	errRecordOverflow = &alertError{alertRecordOverflow, "record too long"}
	errBadRecordMAC   = &alertError{alertBadRecordMAC, "record authentication failed"}
)

// halfConn is one direction's record protection: nil aead while records
// are plaintext (before ServerHello), then the traffic key and sequence.
type halfConn struct {
	aead   cipher.AEAD
	iv     [nonceSize]byte
	seq    uint64
	secret []byte // the current traffic secret, for KeyUpdate
}

func (h *halfConn) setKey(s *suite, secret []byte) {
	aead, iv := s.trafficAEAD(secret)
	h.aead, h.seq, h.secret = aead, 0, secret
	copy(h.iv[:], iv)
}

// nonce is the per-record nonce: the IV XOR the left-padded sequence
// number (RFC 8446 §5.3).
func (h *halfConn) nonce() []byte {
	var n [nonceSize]byte
	n = h.iv
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], h.seq)
	for i := range seq {
		n[4+i] ^= seq[i]
	}
	return n[:]
}

// readRecord reads one record into buf (at least recordHeaderLen +
// maxCiphertext long) and returns its content type and fragment, in place.
// Protected records are opened and their padding removed. A record over
// the limits is refused before its fragment is read.
func readRecord(r io.Reader, h *halfConn, buf []byte) (uint8, []byte, error) {
	if _, err := io.ReadFull(r, buf[:recordHeaderLen]); err != nil {
		return 0, nil, err
	}
	typ := buf[0]
	n := int(binary.BigEndian.Uint16(buf[3:5]))
	switch typ {
	case typeChangeCipherSpec, typeAlert, typeHandshake, typeApplicationData:
	default:
		return 0, nil, &alertError{alertUnexpectedMessage, fmt.Sprintf("record type %d", typ)}
	}
	limit := maxPlaintext
	if h.aead != nil && typ == typeApplicationData {
		limit = maxCiphertext
	}
	if n > limit {
		return 0, nil, errRecordOverflow
	}
	if n == 0 && typ != typeApplicationData {
		// Zero-length fragments are allowed only for application data.
		return 0, nil, &alertError{alertDecodeError, "empty record"}
	}
	frag := buf[recordHeaderLen : recordHeaderLen+n]
	if _, err := io.ReadFull(r, frag); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	if h.aead == nil || typ == typeChangeCipherSpec {
		if h.aead != nil && typ != typeChangeCipherSpec {
			return 0, nil, &alertError{alertUnexpectedMessage, "plaintext record after keys were set"}
		}
		return typ, frag, nil
	}
	if typ != typeApplicationData {
		return 0, nil, &alertError{alertUnexpectedMessage, fmt.Sprintf("protected record of type %d", typ)}
	}
	if n < tagSize+1 {
		return 0, nil, errBadRecordMAC
	}
	if h.seq == ^uint64(0) {
		return 0, nil, &alertError{alertInternalError, "read sequence number exhausted"}
	}
	plain, err := h.aead.Open(frag[:0], h.nonce(), frag, buf[:recordHeaderLen])
	if err != nil {
		return 0, nil, errBadRecordMAC
	}
	h.seq++
	// TLSInnerPlaintext: content || type || zeros.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return 0, nil, &alertError{alertUnexpectedMessage, "record without a content type"}
	}
	if i > maxPlaintext {
		return 0, nil, errRecordOverflow
	}
	return plain[i], plain[:i], nil
}

// sealRecord appends to out one record of type typ carrying content (at
// most maxPlaintext bytes), protected when h has a key.
func sealRecord(out []byte, h *halfConn, typ uint8, content []byte) []byte {
	if h.aead == nil {
		out = append(out, typ, 3, 3, byte(len(content)>>8), byte(len(content)))
		return append(out, content...)
	}
	n := len(content) + 1 + tagSize
	start := len(out)
	out = append(out, typeApplicationData, 3, 3, byte(n>>8), byte(n))
	out = append(out, content...)
	out = append(out, typ)
	hdr := out[start : start+recordHeaderLen]
	out = h.aead.Seal(out[:start+recordHeaderLen], h.nonce(), out[start+recordHeaderLen:], hdr)
	h.seq++
	return out
}
