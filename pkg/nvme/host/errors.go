package host

import (
	"crypto/rand"
	"errors"
	"fmt"

	"basalt/pkg/nvme"
)

// Sentinel errors. Test for them with errors.Is; every error this package
// returns wraps one of them or is a *CommandError.
var (
	// ErrConnectionLost: the command did not complete because its queue's
	// connection ended (closed by either side, a C2HTermReq, a protocol
	// violation, a keep-alive or command timeout). Returned wrapped in a
	// *ConnectionError. Whether the command took effect is unknown.
	ErrConnectionLost = errors.New("host: connection lost")
	// ErrClosed: the Controller was closed by Close or Shutdown.
	ErrClosed = errors.New("host: controller closed")
	// ErrProtocol: the controller broke an NVMe/TCP or NVMe rule that the
	// Linux host checks (wrapped in a *ProtocolError).
	ErrProtocol = errors.New("host: protocol violation by the controller")
	// ErrIncompatible: the controller works but fails a requirement the Linux
	// host enforces at connect time (CPDA, SGLS, ICDOFF, KAS, CNTLID, ...).
	ErrIncompatible = errors.New("host: controller incompatible with the Linux host")
	// ErrInvalidOptions: Options.Validate failed.
	ErrInvalidOptions = errors.New("host: invalid options")
	// ErrInvalidArgument: a request the controller would reject anyway
	// (misaligned buffer, unknown namespace, too large a transfer).
	ErrInvalidArgument = errors.New("host: invalid argument")
	// ErrNoAsyncEvents: the controller advertises no asynchronous events
	// the host enables (OAES has none of bits 8, 9, 11, 31).
	ErrNoAsyncEvents = errors.New("host: controller reports no asynchronous events")
	// ErrNoPath: MultiPath found no usable path for a namespace.
	ErrNoPath = errors.New("host: no usable path")
)

// CommandError is a command that completed with a non-success status. It
// unwraps to its nvme.Status, so errors.As(err, &status) works on any error
// the I/O and admin methods return.
type CommandError struct {
	QID    uint16
	CID    uint16
	Cmd    nvme.Command // the submission queue entry as sent
	Status nvme.Status
	DW0    uint32 // completion DW0 (Connect: IPO/IATTR of an invalid parameter)
}

func (e *CommandError) Error() string {
	detail := ""
	if e.Cmd.Opcode() == nvme.OpcodeFabrics && e.Cmd.FCType() == nvme.FCTypeConnect &&
		e.Status.Code() == nvme.StatusConnectInvalidParameters.Code() {
		where := "SQE"
		if e.DW0&(1<<16) != 0 {
			where = "Connect data"
		}
		detail = fmt.Sprintf(" (invalid parameter at %s byte %d)", where, uint16(e.DW0))
	}
	return fmt.Sprintf("host: %s on queue %d (CID %#04x) failed: %v%s",
		commandName(&e.Cmd, e.QID), e.QID, e.CID, e.Status, detail)
}

// Unwrap returns the completion status.
func (e *CommandError) Unwrap() error { return e.Status }

// ConnectionError fails every command in flight on a queue whose connection
// ended. It unwraps to ErrConnectionLost and to the cause (a *TermReqError, a
// *ProtocolError, ErrClosed, a context error, or a network error).
type ConnectionError struct {
	QID   uint16
	Cause error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("host: queue %d: connection lost: %v", e.QID, e.Cause)
}

// Unwrap returns ErrConnectionLost and the cause.
func (e *ConnectionError) Unwrap() []error { return []error{ErrConnectionLost, e.Cause} }

// TermReqError is a C2HTermReq received from the controller (NVMe/TCP 1.0
// §3.6.2.4): the controller found a fatal transport error and closes the
// connection.
type TermReqError struct {
	QID uint16
	FES nvme.FES
	FEI uint32
	// Header is the start of the offending PDU as the controller returned it.
	Header []byte
}

func (e *TermReqError) Error() string {
	return fmt.Sprintf("host: queue %d: received C2HTermReq (FES %#x %v, FEI %#x)",
		e.QID, uint16(e.FES), e.FES, e.FEI)
}

// ProtocolError is a rule broken by the controller, detected by the host.
// It unwraps to ErrProtocol.
type ProtocolError struct {
	QID    uint16
	Reason string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("host: queue %d: protocol violation: %s", e.QID, e.Reason)
}

// Unwrap returns ErrProtocol.
func (e *ProtocolError) Unwrap() error { return ErrProtocol }

func protocolErrorf(qid uint16, format string, args ...any) error {
	return &ProtocolError{QID: qid, Reason: fmt.Sprintf(format, args...)}
}

func incompatiblef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrIncompatible, fmt.Sprintf(format, args...))
}

// StatusOf returns the NVMe status carried by err, if err is (or wraps) a
// completion with an error status.
func StatusOf(err error) (nvme.Status, bool) {
	var s nvme.Status
	if errors.As(err, &s) {
		return s, true
	}
	return 0, false
}

// IsPathError reports whether the Linux host with native multipath would
// retry the failed command on another path: a path-related status (SCT 3)
// without DNR, or a lost connection (which Linux completes with the
// host-generated 0x371). Any status with DNR is final (NVMe Base 2.0 §4.2.3;
// Linux nvme_decide_disposition).
func IsPathError(err error) bool {
	if errors.Is(err, ErrConnectionLost) {
		return true
	}
	s, ok := StatusOf(err)
	return ok && s.SCT() == nvme.SCTPath && !s.DNR()
}

// IsANAError reports whether err carries one of the ANA statuses 0x301
// (persistent loss), 0x302 (inaccessible) or 0x303 (transition), after which
// the Linux host re-reads the ANA log.
func IsANAError(err error) bool {
	s, ok := StatusOf(err)
	if !ok || s.SCT() != nvme.SCTPath {
		return false
	}
	return s.SC() >= 0x01 && s.SC() <= 0x03
}

var adminNames = map[nvme.Opcode]string{
	nvme.AdminGetLogPage: "Get Log Page", nvme.AdminIdentify: "Identify",
	nvme.AdminAbort: "Abort", nvme.AdminSetFeatures: "Set Features",
	nvme.AdminGetFeatures: "Get Features", nvme.AdminAsyncEventReq: "Asynchronous Event Request",
	nvme.AdminKeepAlive: "Keep Alive",
}

var ioNames = map[nvme.Opcode]string{
	nvme.IOFlush: "Flush", nvme.IOWrite: "Write", nvme.IORead: "Read",
	nvme.IOCompare: "Compare", nvme.IOWriteZeroes: "Write Zeroes",
	nvme.IODatasetMgmt: "Dataset Management",
}

var fabricsNames = map[nvme.FCType]string{
	nvme.FCTypePropertySet: "Property Set", nvme.FCTypeConnect: "Connect",
	nvme.FCTypePropertyGet: "Property Get", nvme.FCTypeAuthSend: "Authentication Send",
	nvme.FCTypeAuthRecv: "Authentication Receive", nvme.FCTypeDisconnect: "Disconnect",
}

// commandName names a command for error messages.
func commandName(c *nvme.Command, qid uint16) string {
	names := ioNames
	if qid == 0 {
		names = adminNames
	}
	if c.Opcode() == nvme.OpcodeFabrics {
		if s, ok := fabricsNames[c.FCType()]; ok {
			return s
		}
		return fmt.Sprintf("Fabrics command %#02x", uint8(c.FCType()))
	}
	if s, ok := names[c.Opcode()]; ok {
		return s
	}
	return fmt.Sprintf("opcode %#02x", uint8(c.Opcode()))
}

func randomUUID() [16]byte {
	var u [16]byte
	rand.Read(u[:])         //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
	u[6] = u[6]&0x0F | 0x40 // version 4
	u[8] = u[8]&0x3F | 0x80 // RFC 4122 variant
	return u
}

func formatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
