package tcp

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/nvme"
)

// Defaults for Options.
const (
	// DefaultMAXH2CDATA is the MAXH2CDATA sent in ICResp: the most data one
	// H2CData PDU may carry. 128 KiB is SPDK's default (max_io_size); the
	// Linux target sends 4 MiB. Host data is read straight into the
	// command's buffer, so the value costs no memory here; it bounds how
	// long the receive goroutine spends in one PDU and keeps the per-PDU
	// header overhead below 0.02%.
	DefaultMAXH2CDATA = 128 << 10
	// DefaultC2HDataSize is the most data put in one C2HData PDU.
	DefaultC2HDataSize = 128 << 10
	// DefaultICReqTimeout is how long a new connection may take to send
	// its ICReq: the Linux host itself waits 10 s for the ICResp.
	DefaultICReqTimeout = 10 * time.Second
	// DefaultConnectTimeout is how long a connection may stay without a
	// successful Connect after its ICResp: the Linux host sends the
	// Connect at once and gives it its admin timeout.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultH2CDataTimeout is how long the data an R2T asks for may take
	// to arrive in full: the Linux host's I/O timeout (30 s), after which
	// it gives up on the command anyway.
	DefaultH2CDataTimeout = 30 * time.Second
	// DefaultReadBufferSize sizes the read buffer of an I/O queue's
	// connection: room for a burst of 32 capsules with 4 KiB of in-capsule
	// data and more, so that one read takes a whole burst and one gathered
	// write answers it (the sender is woken each time the buffer runs
	// dry).
	DefaultReadBufferSize = 256 << 10
	// handshakeReadBufferSize is the read buffer of a connection from its
	// ICReq until an I/O queue Connect (and of an admin queue for good):
	// a capsule with 8 KiB of in-capsule data and a few more.
	handshakeReadBufferSize = 16 << 10
	// DefaultDrainTimeout bounds how long a closing connection waits for
	// its last responses to be written before the socket is closed.
	DefaultDrainTimeout = 5 * time.Second
)

// Options configure a Listener. The zero value is usable: EnsureDefaults
// fills every zero field.
type Options struct {
	// Logger receives connection events and protocol violations.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock drives the timeouts and the accept back-off.
	// Default clock.Real().
	Clock clock.Clock
	// MAXH2CDATA is announced in ICResp: the most data bytes per H2CData
	// PDU. It must be at least 4096 and a multiple of 4 (the Linux host
	// rejects anything else). Default DefaultMAXH2CDATA.
	MAXH2CDATA uint32
	// C2HDataSize is the most data bytes per C2HData PDU. Default
	// DefaultC2HDataSize; must be > 0.
	C2HDataSize uint32
	// ICReqTimeout is how long a connection may stay without a valid
	// ICReq before it is closed. Default DefaultICReqTimeout.
	ICReqTimeout time.Duration
	// ConnectTimeout is how long a connection may stay without a
	// successful Fabrics Connect after its ICResp before it is closed.
	// Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// H2CDataTimeout is how long the data an R2T asks for may take to
	// arrive in full; then the connection is closed (the specification
	// names no FES for it). Default DefaultH2CDataTimeout.
	H2CDataTimeout time.Duration
	// DrainTimeout bounds how long a closing connection keeps writing
	// queued responses. Default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// ReadBufferSize is the size of an I/O queue connection's read buffer
	// in bytes, allocated once its Connect succeeded (before, and on admin
	// queues, it is 16 KiB or ReadBufferSize if smaller). Default
	// DefaultReadBufferSize; at least 4096.
	ReadBufferSize int
	// Budget holds the connection counts and data buffers of the node,
	// within its Limits; share one among the node's Listeners. Default: a
	// Budget of this Listener's own with the default Limits.
	Budget *Budget
	// DisableHeaderDigest and DisableDataDigest refuse hosts that ask for
	// the digest: they receive a C2HTermReq with FES Unsupported Parameter
	// pointing at ICReq DGST. By default both digests are allowed.
	DisableHeaderDigest bool
	DisableDataDigest   bool
	// TLSHandshakeTimeout bounds a connection's TLS handshake on a port
	// that offers TLS (and, in mode optional, the wait for its first
	// byte). Default DefaultTLSHandshakeTimeout.
	TLSHandshakeTimeout time.Duration
	// DisableC2HSuccess stops the transport from ending reads with a
	// C2HData PDU carrying the SUCCESS flag (used only on queues whose
	// Connect disabled SQ flow control).
	DisableC2HSuccess bool
}

// ErrInvalidOptions is wrapped by Options.Validate's errors.
var ErrInvalidOptions = errors.New("tcp: invalid options")

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.MAXH2CDATA == 0 {
		o.MAXH2CDATA = DefaultMAXH2CDATA
	}
	if o.C2HDataSize == 0 {
		o.C2HDataSize = DefaultC2HDataSize
	}
	if o.TLSHandshakeTimeout == 0 {
		o.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if o.ICReqTimeout == 0 {
		o.ICReqTimeout = DefaultICReqTimeout
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.H2CDataTimeout == 0 {
		o.H2CDataTimeout = DefaultH2CDataTimeout
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.ReadBufferSize == 0 {
		o.ReadBufferSize = DefaultReadBufferSize
	}
	if o.Budget == nil {
		o.Budget, _ = NewBudget(Limits{}) // the default limits are valid
	}
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.MAXH2CDATA < nvme.MinMaxH2CData || o.MAXH2CDATA%4 != 0 {
		errs = append(errs, fmt.Errorf("MAXH2CDATA %d: must be >= %d and a multiple of 4",
			o.MAXH2CDATA, nvme.MinMaxH2CData))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ICReqTimeout", o.ICReqTimeout}, {"ConnectTimeout", o.ConnectTimeout}, {"H2CDataTimeout", o.H2CDataTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must be positive", d.name, d.v))
		}
	}
	if o.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("DrainTimeout %v: must be positive", o.DrainTimeout))
	}
	if o.ReadBufferSize < 4096 {
		errs = append(errs, fmt.Errorf("ReadBufferSize %d: must be >= 4096", o.ReadBufferSize))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
}
