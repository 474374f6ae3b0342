package nvme

// Discovery log entry values for a port's secure channel (NVMe-oF 1.1
// Figure 38, NVMe/TCP 1.1 TSAS).
const (
	// TREQSecureChannelRequired: TREQ bits 1:0 = 01b, a secure channel is
	// required.
	TREQSecureChannelRequired = 0x01
	// SECTYPETLS13: TSAS SECTYPE TLS 1.3.
	SECTYPETLS13 = 2
)
