package psktls

import "fmt"

// Alert descriptions (RFC 8446 §6).
const (
	alertCloseNotify           uint8 = 0
	alertUnexpectedMessage     uint8 = 10
	alertBadRecordMAC          uint8 = 20
	alertRecordOverflow        uint8 = 22
	alertHandshakeFailure      uint8 = 40
	alertIllegalParameter      uint8 = 47
	alertDecodeError           uint8 = 50
	alertDecryptError          uint8 = 51
	alertProtocolVersion       uint8 = 70
	alertInternalError         uint8 = 80
	alertMissingExtension      uint8 = 109
	alertUnknownPSKIdentity    uint8 = 115
	alertLevelWarning          uint8 = 1
	alertLevelFatal            uint8 = 2
	alertUserCanceled          uint8 = 90
	alertInsufficientSecurity  uint8 = 71
	alertUnsupportedExtension  uint8 = 110
	alertNoApplicationProtocol uint8 = 120
)

var alertNames = map[uint8]string{
	alertCloseNotify: "close_notify", alertUnexpectedMessage: "unexpected_message",
	alertBadRecordMAC: "bad_record_mac", alertRecordOverflow: "record_overflow",
	alertHandshakeFailure: "handshake_failure", alertIllegalParameter: "illegal_parameter",
	alertDecodeError: "decode_error", alertDecryptError: "decrypt_error",
	alertProtocolVersion: "protocol_version", alertInternalError: "internal_error",
	alertMissingExtension: "missing_extension", alertUnknownPSKIdentity: "unknown_psk_identity",
	alertUserCanceled: "user_canceled", alertInsufficientSecurity: "insufficient_security",
	alertUnsupportedExtension: "unsupported_extension", alertNoApplicationProtocol: "no_application_protocol",
}

// alertName names an alert description.
func alertName(a uint8) string {
	if n, ok := alertNames[a]; ok {
		return n
	}
	return fmt.Sprintf("alert(%d)", a)
}

// alertError is a local failure: the connection sends the alert and ends.
type alertError struct {
	alert  uint8
	reason string
}

func (e *alertError) Error() string {
	return "psktls: " + e.reason + " (" + alertName(e.alert) + ")"
}

// PeerAlertError is an alert the peer sent.
type PeerAlertError struct{ Alert uint8 }

func (e *PeerAlertError) Error() string {
	return "psktls: peer sent alert " + alertName(e.Alert)
}
