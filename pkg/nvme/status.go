package nvme

import "fmt"

// Status is an NVMe completion status without the phase bit:
//
//	bits 7:0 SC, bits 10:8 SCT, bits 12:11 CRD, bit 13 M, bit 14 DNR
//
// so that uint16(s)<<1 is the CQE status halfword (NVMe Base 2.0 §4.2.3).
// The zero value is success.
type Status uint16

// Status code types (SCT).
const (
	SCTGeneric         = 0x0
	SCTCommandSpecific = 0x1
	SCTMediaError      = 0x2
	SCTPath            = 0x3
)

const (
	statusDNR  Status = 1 << 14
	statusMore Status = 1 << 13
)

// MakeStatus builds a status from its type and code, without DNR.
func MakeStatus(sct, sc uint8) Status { return Status(uint16(sct&7)<<8 | uint16(sc)) }

// Generic command status (SCT 0), NVMe Base 2.0 §4.2.3.1 Figure 102.
var (
	StatusSuccess               = MakeStatus(SCTGeneric, 0x00)
	StatusInvalidOpcode         = MakeStatus(SCTGeneric, 0x01).WithDNR()
	StatusInvalidField          = MakeStatus(SCTGeneric, 0x02).WithDNR()
	StatusCommandIDConflict     = MakeStatus(SCTGeneric, 0x03).WithDNR()
	StatusDataTransferError     = MakeStatus(SCTGeneric, 0x04)
	StatusPowerLossAbort        = MakeStatus(SCTGeneric, 0x05)
	StatusInternalError         = MakeStatus(SCTGeneric, 0x06)
	StatusAbortRequested        = MakeStatus(SCTGeneric, 0x07)
	StatusInvalidNamespace      = MakeStatus(SCTGeneric, 0x0B).WithDNR()
	StatusCommandSequenceError  = MakeStatus(SCTGeneric, 0x0C).WithDNR()
	StatusInvalidSGLDescriptor  = MakeStatus(SCTGeneric, 0x0D).WithDNR()
	StatusDataSGLLengthInvalid  = MakeStatus(SCTGeneric, 0x0F).WithDNR()
	StatusSGLTypeInvalid        = MakeStatus(SCTGeneric, 0x11).WithDNR()
	StatusSGLOffsetInvalid      = MakeStatus(SCTGeneric, 0x16).WithDNR()
	StatusNamespaceWriteProtect = MakeStatus(SCTGeneric, 0x20).WithDNR()
	StatusLBAOutOfRange         = MakeStatus(SCTGeneric, 0x80).WithDNR()
	StatusCapacityExceeded      = MakeStatus(SCTGeneric, 0x81).WithDNR()
	StatusNamespaceNotReady     = MakeStatus(SCTGeneric, 0x82)
)

// Command specific status (SCT 1).
var (
	StatusInvalidQueueIdentifier = MakeStatus(SCTCommandSpecific, 0x01).WithDNR()
	StatusInvalidQueueSize       = MakeStatus(SCTCommandSpecific, 0x02).WithDNR()
	StatusAERLimitExceeded       = MakeStatus(SCTCommandSpecific, 0x05).WithDNR()
	StatusInvalidLogPage         = MakeStatus(SCTCommandSpecific, 0x09).WithDNR()
	StatusFeatureNotSaveable     = MakeStatus(SCTCommandSpecific, 0x0D).WithDNR()
	StatusFeatureNotChangeable   = MakeStatus(SCTCommandSpecific, 0x0E).WithDNR()
	// Fabrics (NVMe-oF 1.1 §2.4 Figure 15).
	StatusConnectIncompatibleFormat = MakeStatus(SCTCommandSpecific, 0x80).WithDNR()
	StatusConnectControllerBusy     = MakeStatus(SCTCommandSpecific, 0x81).WithDNR()
	StatusConnectInvalidParameters  = MakeStatus(SCTCommandSpecific, 0x82).WithDNR()
	StatusConnectRestartDiscovery   = MakeStatus(SCTCommandSpecific, 0x83).WithDNR()
	StatusConnectInvalidHost        = MakeStatus(SCTCommandSpecific, 0x84).WithDNR()
)

// Media and data integrity errors (SCT 2).
var (
	StatusWriteFault           = MakeStatus(SCTMediaError, 0x80)
	StatusUnrecoveredReadError = MakeStatus(SCTMediaError, 0x81)
)

// Path related status (SCT 3), NVMe Base 2.0 §4.2.3.4. Never with DNR: the
// Linux host fails over only on path errors without DNR.
var (
	StatusInternalPathError    = MakeStatus(SCTPath, 0x00)
	StatusANAPersistentLoss    = MakeStatus(SCTPath, 0x01)
	StatusANAInaccessible      = MakeStatus(SCTPath, 0x02)
	StatusANATransition        = MakeStatus(SCTPath, 0x03)
	StatusControllerPathingErr = MakeStatus(SCTPath, 0x60)
)

// WithDNR returns s with the Do Not Retry bit set.
func (s Status) WithDNR() Status { return s | statusDNR }

// WithoutDNR returns s with the Do Not Retry bit cleared.
func (s Status) WithoutDNR() Status { return s &^ statusDNR }

// DNR reports whether the Do Not Retry bit is set.
func (s Status) DNR() bool { return s&statusDNR != 0 }

// SCT returns the status code type.
func (s Status) SCT() uint8 { return uint8(s>>8) & 7 }

// SC returns the status code.
func (s Status) SC() uint8 { return uint8(s) }

// Code returns SCT<<8|SC, the value the Linux kernel prints.
func (s Status) Code() uint16 { return uint16(s) & 0x7FF }

// Success reports whether s is a successful status.
func (s Status) Success() bool { return s.Code() == 0 }

// Wire returns the CQE status halfword (phase bit 0).
func (s Status) Wire() uint16 { return uint16(s) << 1 }

// StatusFromWire decodes a CQE status halfword.
func StatusFromWire(w uint16) Status { return Status(w >> 1) }

func (s Status) String() string {
	d := ""
	if s.DNR() {
		d = " DNR"
	}
	return fmt.Sprintf("status %#05x (SCT %d SC %#02x)%s", s.Code(), s.SCT(), s.SC(), d)
}

// Error makes a failed status usable as an error (host library).
func (s Status) Error() string { return "nvme: " + s.String() }
