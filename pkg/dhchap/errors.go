package dhchap

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"basalt/pkg/nvme"
)

// ErrAuthFailed is wrapped when a response does not match: the peer does
// not know the secret.
var ErrAuthFailed = errors.New("dhchap: authentication failed")

// ProtocolError ends a transaction. The side that found the fault sends an
// AUTH_Failure message with Explanation as its reason code explanation;
// Remote marks a fault the peer reported in an AUTH_Failure of its own
// (nothing is sent back). Err says what went wrong, never with a secret.
type ProtocolError struct {
	Explanation nvme.AuthFailureExplanation
	Remote      bool
	Err         error
}

func (e *ProtocolError) Error() string {
	who := "local"
	if e.Remote {
		who = "peer"
	}
	return fmt.Sprintf("dhchap: %s failure, %s: %v", who, ExplanationString(e.Explanation), e.Err)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

func failf(expl nvme.AuthFailureExplanation, format string, args ...any) *ProtocolError {
	return &ProtocolError{Explanation: expl, Err: fmt.Errorf(format, args...)}
}

func fail(expl nvme.AuthFailureExplanation, err error) *ProtocolError {
	return &ProtocolError{Explanation: expl, Err: err}
}

// Explanation returns the reason code explanation to send for err: that of
// a *ProtocolError, else Failed.
func Explanation(err error) nvme.AuthFailureExplanation {
	if pe, ok := errors.AsType[*ProtocolError](err); ok {
		return pe.Explanation
	}
	return nvme.AuthFailureFailed
}

// ExplanationString names a reason code explanation.
func ExplanationString(e nvme.AuthFailureExplanation) string {
	switch e {
	case nvme.AuthFailureFailed:
		return "authentication failed"
	case nvme.AuthFailureNotUsable:
		return "authentication protocol not usable"
	case nvme.AuthFailureConcatMismatch:
		return "secure channel concatenation mismatch"
	case nvme.AuthFailureHashUnusable:
		return "hash function not usable"
	case nvme.AuthFailureDHGroupUnusable:
		return "DH group not usable"
	case nvme.AuthFailureIncorrectPayload:
		return "incorrect payload"
	case nvme.AuthFailureIncorrectMessage:
		return "incorrect protocol message"
	}
	return fmt.Sprintf("explanation %#02x", uint8(e))
}

// seqnum is the process-wide sequence number counter (Linux
// nvme_auth_get_seqnum): it starts at a random value and never yields 0,
// which means "no bidirectional authentication".
var seqnum struct {
	sync.Mutex
	v uint32
}

// NextSeqNum returns the next sequence number for S1 or S2.
func NextSeqNum() uint32 {
	seqnum.Lock()
	defer seqnum.Unlock()
	if seqnum.v == 0 {
		var b [4]byte
		rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails
		seqnum.v = binary.LittleEndian.Uint32(b[:])
	} else {
		seqnum.v++
	}
	if seqnum.v == 0 {
		seqnum.v++
	}
	return seqnum.v
}
