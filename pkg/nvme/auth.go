package nvme

import "encoding/binary"

// In-band authentication (NVMe Base 2.0 §8.13, the DH-HMAC-CHAP protocol of
// TP 8006): the command fields of Authentication Send / Receive, the
// message identifiers, the hash and Diffie-Hellman group identifiers and the
// failure reason codes. The message formats themselves are in pkg/dhchap.
//
// Authentication Send (FCTYPE 05h) and Authentication Receive (FCTYPE 06h),
// NVMe Base 2.0 §6.2 / §6.3, 64-byte SQE:
//
//	 0  opcode 7Fh, flags, CID
//	 4  FCTYPE (05h send, 06h receive), reserved
//	24  DPTR (SGL): the message (send: in-capsule, TL bytes; receive: AL bytes)
//	40  reserved
//	41  SPSP0   security protocol specific 0: 01h for DH-HMAC-CHAP
//	42  SPSP1   security protocol specific 1: 01h for DH-HMAC-CHAP
//	43  SECP    security protocol: E9h, NVMe in-band authentication
//	44  TL (send) / AL (receive), LE32: transfer / allocation length
//	48  reserved

// Authentication Send / Receive command offsets.
const (
	AuthOffsetSPSP0 = 41
	AuthOffsetSPSP1 = 42
	AuthOffsetSECP  = 43
	AuthOffsetTL    = 44 // Authentication Send: transfer length
	AuthOffsetAL    = 44 // Authentication Receive: allocation length
)

// AuthSECPDHHMACCHAP is SECP E9h (NVMe in-band authentication), and the
// SPSP0/SPSP1 values DH-HMAC-CHAP uses.
const (
	AuthSECPDHHMACCHAP  uint8 = 0xE9
	AuthSPSPDHHMACCHAP0 uint8 = 0x01
	AuthSPSPDHHMACCHAP1 uint8 = 0x01
)

// StatusAuthRequired is Authentication Required (SCT 1, SC 91h), with DNR
// as nvmet sends it: every command but Connect and Authentication
// Send/Receive on a queue that has not authenticated.
var StatusAuthRequired = MakeStatus(SCTCommandSpecific, 0x91).WithDNR()

// Connect response DW0 AUTHREQ bits (NVMe-oF: the controller requires
// authentication (ATR) or a secure channel concatenation (ASCR)).
const (
	ConnectAuthReqATR  uint32 = 1 << 17
	ConnectAuthReqASCR uint32 = 1 << 18
)

// AuthType is the first byte of an authentication message (AUTH-TYPE).
type AuthType uint8

// Message types.
const (
	AuthTypeCommon AuthType = 0x00 // AUTH_Negotiate, AUTH_Failure1/2
	AuthTypeDHCHAP AuthType = 0x01 // DH-HMAC-CHAP_Challenge .. _Success2
)

// AuthID is the second byte of an authentication message (AUTH-ID).
type AuthID uint8

// Message identifiers.
const (
	AuthIDNegotiate AuthID = 0x00 // AUTH_Negotiate (common)
	AuthIDChallenge AuthID = 0x01 // DH-HMAC-CHAP_Challenge
	AuthIDReply     AuthID = 0x02 // DH-HMAC-CHAP_Reply
	AuthIDSuccess1  AuthID = 0x03 // DH-HMAC-CHAP_Success1
	AuthIDSuccess2  AuthID = 0x04 // DH-HMAC-CHAP_Success2
	AuthIDFailure2  AuthID = 0xF0 // AUTH_Failure2 (common, host to controller)
	AuthIDFailure1  AuthID = 0xF1 // AUTH_Failure1 (common, controller to host)
)

// AuthProtocolDHHMACCHAP is the AUTHID of a DH-HMAC-CHAP protocol
// descriptor in AUTH_Negotiate.
const AuthProtocolDHHMACCHAP uint8 = 0x01

// Secure channel concatenation (SC_C of AUTH_Negotiate).
const (
	AuthSCCNone          uint8 = 0x00
	AuthSCCNewTLSPSK     uint8 = 0x01
	AuthSCCReplaceTLSPSK uint8 = 0x02
)

// AuthHashID identifies a hash function (HashID).
type AuthHashID uint8

// Hash functions.
const (
	AuthHashSHA256 AuthHashID = 0x01
	AuthHashSHA384 AuthHashID = 0x02
	AuthHashSHA512 AuthHashID = 0x03
)

// AuthDHGroupID identifies a Diffie-Hellman group (DHgIDs).
type AuthDHGroupID uint8

// Diffie-Hellman groups (RFC 7919 finite field groups).
const (
	AuthDHGroupNull      AuthDHGroupID = 0x00
	AuthDHGroupFFDHE2048 AuthDHGroupID = 0x01
	AuthDHGroupFFDHE3072 AuthDHGroupID = 0x02
	AuthDHGroupFFDHE4096 AuthDHGroupID = 0x03
	AuthDHGroupFFDHE6144 AuthDHGroupID = 0x04
	AuthDHGroupFFDHE8192 AuthDHGroupID = 0x05
)

// AuthFailureReason is the reason code (RC) of AUTH_Failure1/2.
type AuthFailureReason uint8

// AuthFailureReasonFailed is the only reason code: authentication failure.
const AuthFailureReasonFailed AuthFailureReason = 0x01

// AuthFailureExplanation is the reason code explanation (RCE).
type AuthFailureExplanation uint8

// Reason code explanations.
const (
	AuthFailureFailed           AuthFailureExplanation = 0x01 // authentication failed
	AuthFailureNotUsable        AuthFailureExplanation = 0x02 // authentication protocol not usable
	AuthFailureConcatMismatch   AuthFailureExplanation = 0x03 // secure channel concatenation mismatch
	AuthFailureHashUnusable     AuthFailureExplanation = 0x04 // hash function not usable
	AuthFailureDHGroupUnusable  AuthFailureExplanation = 0x05 // DH group not usable
	AuthFailureIncorrectPayload AuthFailureExplanation = 0x06 // incorrect payload
	AuthFailureIncorrectMessage AuthFailureExplanation = 0x07 // incorrect protocol message
)

// AuthCmd holds the decoded fields of an Authentication Send/Receive SQE.
type AuthCmd struct {
	SECP, SPSP0, SPSP1 uint8
	// Len is TL (send) or AL (receive).
	Len uint32
}

// DecodeAuth reads the Authentication Send/Receive fields of an SQE.
func (c *Command) DecodeAuth() AuthCmd {
	return AuthCmd{
		SECP: c[AuthOffsetSECP], SPSP0: c[AuthOffsetSPSP0], SPSP1: c[AuthOffsetSPSP1],
		Len: binary.LittleEndian.Uint32(c[AuthOffsetTL:]),
	}
}

// EncodeAuth makes c an Authentication Send (send true) or Receive of a
// DH-HMAC-CHAP message of n bytes, as the Linux host builds them. The SGL
// is the caller's.
func (c *Command) EncodeAuth(send bool, n uint32) {
	c[0] = byte(OpcodeFabrics)
	if send {
		c.SetFCType(FCTypeAuthSend)
	} else {
		c.SetFCType(FCTypeAuthRecv)
	}
	c[AuthOffsetSECP] = AuthSECPDHHMACCHAP
	c[AuthOffsetSPSP0] = AuthSPSPDHHMACCHAP0
	c[AuthOffsetSPSP1] = AuthSPSPDHHMACCHAP1
	binary.LittleEndian.PutUint32(c[AuthOffsetTL:], n)
}
