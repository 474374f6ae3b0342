package dhchap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"basalt/pkg/nvme"
)

// ErrMalformed is wrapped by every decoding error: the message is shorter
// than its fields say, or a field is out of range. The receiving side
// answers it with nvme.AuthFailureIncorrectPayload.
var ErrMalformed = errors.New("dhchap: malformed message")

// Every message starts with the same 6 bytes; the decoders below accept
// trailing bytes (an Authentication Receive returns AL bytes, the message
// then zero padding):
//
//	0  AUTH-TYPE  (00h common, 01h DH-HMAC-CHAP)
//	1  AUTH-ID    (nvme.AuthID*)
//	2  reserved (2)
//	4  T_ID       transaction identifier, LE16
const headerSize = 6

// Header is the start of any authentication message.
type Header struct {
	Type nvme.AuthType
	ID   nvme.AuthID
	TID  uint16
}

// DecodeHeader reads the common start of a message.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < headerSize {
		return Header{}, fmt.Errorf("%w: %d bytes, a header has %d", ErrMalformed, len(b), headerSize)
	}
	return Header{Type: nvme.AuthType(b[0]), ID: nvme.AuthID(b[1]), TID: binary.LittleEndian.Uint16(b[4:])}, nil
}

func putHeader(b []byte, t nvme.AuthType, id nvme.AuthID, tid uint16) {
	b[0], b[1] = byte(t), byte(id)
	binary.LittleEndian.PutUint16(b[4:], tid)
}

func expect(b []byte, t nvme.AuthType, id nvme.AuthID, min int) (Header, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return h, err
	}
	if h.Type != t || h.ID != id {
		return h, fmt.Errorf("%w: message %02x/%02x, want %02x/%02x", ErrMalformed, h.Type, h.ID, t, id)
	}
	if len(b) < min {
		return h, fmt.Errorf("%w: %d bytes, at least %d needed", ErrMalformed, len(b), min)
	}
	return h, nil
}

// Limits of the identifier lists of a DH-HMAC-CHAP protocol descriptor.
const (
	MaxHashIDs     = 30
	MaxDHGroupIDs  = 30
	negotiateSize  = 8
	descriptorSize = 64
)

// Negotiate is AUTH_Negotiate (host → controller):
//
//	0  AUTH-TYPE 00h, AUTH-ID 00h, reserved (2), T_ID (2)
//	6  SC_C      secure channel concatenation (00h none)
//	7  NAPD      number of protocol descriptors
//	8  NAPD × 64-byte descriptors:
//	   0  AUTHID  01h DH-HMAC-CHAP
//	   1  reserved
//	   2  HALEN   number of hash IDs (≤ 30)
//	   3  DHLEN   number of DH group IDs (≤ 30)
//	   4  IDLIST  hash IDs in bytes 4..33, DH group IDs in bytes 34..63
type Negotiate struct {
	TID       uint16
	SCC       uint8
	Protocols []Protocol
}

// Protocol is one protocol descriptor of AUTH_Negotiate.
type Protocol struct {
	AuthID uint8
	Hashes []nvme.AuthHashID
	Groups []nvme.AuthDHGroupID
}

// Encode returns the message.
func (m *Negotiate) Encode() []byte {
	b := make([]byte, negotiateSize+descriptorSize*len(m.Protocols))
	putHeader(b, nvme.AuthTypeCommon, nvme.AuthIDNegotiate, m.TID)
	b[6], b[7] = m.SCC, byte(len(m.Protocols))
	for i, p := range m.Protocols {
		d := b[negotiateSize+descriptorSize*i:]
		d[0], d[2], d[3] = p.AuthID, byte(len(p.Hashes)), byte(len(p.Groups))
		for j, h := range p.Hashes[:min(len(p.Hashes), MaxHashIDs)] {
			d[4+j] = byte(h)
		}
		for j, g := range p.Groups[:min(len(p.Groups), MaxDHGroupIDs)] {
			d[4+MaxHashIDs+j] = byte(g)
		}
	}
	return b
}

// DecodeNegotiate reads AUTH_Negotiate: at least one descriptor, every
// descriptor NAPD announces present, list lengths within bounds.
func DecodeNegotiate(b []byte) (Negotiate, error) {
	h, err := expect(b, nvme.AuthTypeCommon, nvme.AuthIDNegotiate, negotiateSize+descriptorSize)
	if err != nil {
		return Negotiate{}, err
	}
	m := Negotiate{TID: h.TID, SCC: b[6]}
	napd := int(b[7])
	if napd == 0 || len(b) < negotiateSize+descriptorSize*napd {
		return m, fmt.Errorf("%w: NAPD %d with %d bytes", ErrMalformed, napd, len(b))
	}
	for i := range napd {
		d := b[negotiateSize+descriptorSize*i:]
		halen, dhlen := int(d[2]), int(d[3])
		if halen > MaxHashIDs || dhlen > MaxDHGroupIDs {
			return m, fmt.Errorf("%w: HALEN %d DHLEN %d (at most %d each)", ErrMalformed, halen, dhlen, MaxHashIDs)
		}
		p := Protocol{AuthID: d[0]}
		for _, x := range d[4 : 4+halen] {
			p.Hashes = append(p.Hashes, nvme.AuthHashID(x))
		}
		for _, x := range d[4+MaxHashIDs : 4+MaxHashIDs+dhlen] {
			p.Groups = append(p.Groups, nvme.AuthDHGroupID(x))
		}
		m.Protocols = append(m.Protocols, p)
	}
	return m, nil
}

// challengeSize etc. are the fixed parts of the DH-HMAC-CHAP messages.
const (
	challengeSize = 16
	replySize     = 16
	success1Size  = 16
	success2Size  = 16
	failureSize   = 8
)

// FailureSize is the length of AUTH_Failure1/2, the shortest message.
const FailureSize = failureSize

// Challenge is DH-HMAC-CHAP_Challenge (controller → host):
//
//	 0  AUTH-TYPE 01h, AUTH-ID 01h, reserved (2), T_ID (2)
//	 6  HL       hash length
//	 7  reserved
//	 8  HASHID   the hash function chosen
//	 9  DHGID    the DH group chosen
//	10  DHVLEN   DH value length, LE16 (0 with the null group)
//	12  SEQNUM   S1, LE32
//	16  C1       challenge, HL bytes
//	16+HL       DH value g^y mod p, DHVLEN bytes
type Challenge struct {
	TID     uint16
	Hash    nvme.AuthHashID
	Group   nvme.AuthDHGroupID
	Seq     uint32
	C       []byte // HL bytes
	DHValue []byte
}

// Encode returns the message.
func (m *Challenge) Encode() []byte {
	b := make([]byte, challengeSize+len(m.C)+len(m.DHValue))
	putHeader(b, nvme.AuthTypeDHCHAP, nvme.AuthIDChallenge, m.TID)
	b[6], b[8], b[9] = byte(len(m.C)), byte(m.Hash), byte(m.Group)
	binary.LittleEndian.PutUint16(b[10:], uint16(len(m.DHValue)))
	binary.LittleEndian.PutUint32(b[12:], m.Seq)
	copy(b[challengeSize:], m.C)
	copy(b[challengeSize+len(m.C):], m.DHValue)
	return b
}

// DecodeChallenge reads DH-HMAC-CHAP_Challenge: HL and DHVLEN bytes present.
// It does not judge the hash or group (the host answers those with their
// own failure codes).
func DecodeChallenge(b []byte) (Challenge, error) {
	h, err := expect(b, nvme.AuthTypeDHCHAP, nvme.AuthIDChallenge, challengeSize)
	if err != nil {
		return Challenge{}, err
	}
	hl, dhvlen := int(b[6]), int(binary.LittleEndian.Uint16(b[10:]))
	if len(b) < challengeSize+hl+dhvlen {
		return Challenge{}, fmt.Errorf("%w: HL %d DHVLEN %d with %d bytes", ErrMalformed, hl, dhvlen, len(b))
	}
	return Challenge{
		TID: h.TID, Hash: nvme.AuthHashID(b[8]), Group: nvme.AuthDHGroupID(b[9]),
		Seq:     binary.LittleEndian.Uint32(b[12:]),
		C:       clone(b[challengeSize : challengeSize+hl]),
		DHValue: clone(b[challengeSize+hl : challengeSize+hl+dhvlen]),
	}, nil
}

// Reply is DH-HMAC-CHAP_Reply (host → controller):
//
//	 0  AUTH-TYPE 01h, AUTH-ID 02h, reserved (2), T_ID (2)
//	 6  HL       hash length
//	 7  reserved
//	 8  CVALID   01h: C2 is valid (the host asks the controller to prove itself)
//	 9  reserved
//	10  DHVLEN   DH value length, LE16
//	12  SEQNUM   S2, LE32 (0: no bidirectional authentication)
//	16  R1       response, HL bytes
//	16+HL       C2, HL bytes (zero unless CVALID)
//	16+2×HL     DH value g^x mod p, DHVLEN bytes
type Reply struct {
	TID      uint16
	CValid   bool
	Seq      uint32
	Response []byte // HL bytes
	C2       []byte // HL bytes
	DHValue  []byte
}

// Encode returns the message (C2 is zeros when absent, as Linux sends it).
func (m *Reply) Encode() []byte {
	hl := len(m.Response)
	b := make([]byte, replySize+2*hl+len(m.DHValue))
	putHeader(b, nvme.AuthTypeDHCHAP, nvme.AuthIDReply, m.TID)
	b[6] = byte(hl)
	if m.CValid {
		b[8] = 1
	}
	binary.LittleEndian.PutUint16(b[10:], uint16(len(m.DHValue)))
	binary.LittleEndian.PutUint32(b[12:], m.Seq)
	copy(b[replySize:], m.Response)
	copy(b[replySize+hl:replySize+2*hl], m.C2)
	copy(b[replySize+2*hl:], m.DHValue)
	return b
}

// DecodeReply reads DH-HMAC-CHAP_Reply: 2×HL and DHVLEN bytes present, and
// CVALID 0 or 1.
func DecodeReply(b []byte) (Reply, error) {
	h, err := expect(b, nvme.AuthTypeDHCHAP, nvme.AuthIDReply, replySize)
	if err != nil {
		return Reply{}, err
	}
	hl, dhvlen := int(b[6]), int(binary.LittleEndian.Uint16(b[10:]))
	if len(b) < replySize+2*hl+dhvlen {
		return Reply{}, fmt.Errorf("%w: HL %d DHVLEN %d with %d bytes", ErrMalformed, hl, dhvlen, len(b))
	}
	if b[8] > 1 {
		return Reply{}, fmt.Errorf("%w: CVALID %#x", ErrMalformed, b[8])
	}
	return Reply{
		TID: h.TID, CValid: b[8] == 1, Seq: binary.LittleEndian.Uint32(b[12:]),
		Response: clone(b[replySize : replySize+hl]),
		C2:       clone(b[replySize+hl : replySize+2*hl]),
		DHValue:  clone(b[replySize+2*hl : replySize+2*hl+dhvlen]),
	}, nil
}

// Success1 is DH-HMAC-CHAP_Success1 (controller → host):
//
//	 0  AUTH-TYPE 01h, AUTH-ID 03h, reserved (2), T_ID (2)
//	 6  HL       hash length
//	 7  reserved
//	 8  RVALID   01h: R2 is valid
//	 9  reserved (7)
//	16  R2       controller response, HL bytes (present when RVALID)
type Success1 struct {
	TID      uint16
	HL       uint8
	RValid   bool
	Response []byte // HL bytes when RValid
}

// Encode returns the message.
func (m *Success1) Encode() []byte {
	b := make([]byte, success1Size+len(m.Response))
	putHeader(b, nvme.AuthTypeDHCHAP, nvme.AuthIDSuccess1, m.TID)
	b[6] = m.HL
	if m.RValid {
		b[8] = 1
	}
	copy(b[success1Size:], m.Response)
	return b
}

// DecodeSuccess1 reads DH-HMAC-CHAP_Success1: R2 present when RVALID.
func DecodeSuccess1(b []byte) (Success1, error) {
	h, err := expect(b, nvme.AuthTypeDHCHAP, nvme.AuthIDSuccess1, success1Size)
	if err != nil {
		return Success1{}, err
	}
	m := Success1{TID: h.TID, HL: b[6]}
	switch b[8] {
	case 0:
	case 1:
		if len(b) < success1Size+int(m.HL) {
			return Success1{}, fmt.Errorf("%w: HL %d with %d bytes", ErrMalformed, m.HL, len(b))
		}
		m.RValid, m.Response = true, clone(b[success1Size:success1Size+int(m.HL)])
	default:
		return Success1{}, fmt.Errorf("%w: RVALID %#x", ErrMalformed, b[8])
	}
	return m, nil
}

// Success2 is DH-HMAC-CHAP_Success2 (host → controller), sent when the host
// checked R2:
//
//	0  AUTH-TYPE 01h, AUTH-ID 04h, reserved (2), T_ID (2)
//	6  reserved (10)
type Success2 struct{ TID uint16 }

// Encode returns the message.
func (m *Success2) Encode() []byte {
	b := make([]byte, success2Size)
	putHeader(b, nvme.AuthTypeDHCHAP, nvme.AuthIDSuccess2, m.TID)
	return b
}

// DecodeSuccess2 reads DH-HMAC-CHAP_Success2.
func DecodeSuccess2(b []byte) (Success2, error) {
	h, err := expect(b, nvme.AuthTypeDHCHAP, nvme.AuthIDSuccess2, success2Size)
	return Success2{TID: h.TID}, err
}

// Failure is AUTH_Failure1 (controller → host) or AUTH_Failure2 (host →
// controller):
//
//	0  AUTH-TYPE 00h, AUTH-ID F1h (Failure1) or F0h (Failure2), reserved (2), T_ID (2)
//	6  RC       reason code: 01h authentication failure
//	7  RCE      reason code explanation (nvme.AuthFailure*)
type Failure struct {
	ID          nvme.AuthID // AuthIDFailure1 or AuthIDFailure2
	TID         uint16
	Reason      nvme.AuthFailureReason
	Explanation nvme.AuthFailureExplanation
}

// Encode returns the message.
func (m *Failure) Encode() []byte {
	b := make([]byte, failureSize)
	putHeader(b, nvme.AuthTypeCommon, m.ID, m.TID)
	b[6], b[7] = byte(m.Reason), byte(m.Explanation)
	return b
}

// DecodeFailure reads AUTH_Failure1 or AUTH_Failure2 (id says which).
func DecodeFailure(b []byte, id nvme.AuthID) (Failure, error) {
	h, err := expect(b, nvme.AuthTypeCommon, id, failureSize)
	if err != nil {
		return Failure{}, err
	}
	return Failure{ID: id, TID: h.TID, Reason: nvme.AuthFailureReason(b[6]), Explanation: nvme.AuthFailureExplanation(b[7])}, nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
