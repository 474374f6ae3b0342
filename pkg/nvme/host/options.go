package host

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/nvme"
)

// Defaults, as the Linux host uses them (NVMF_DEF_QUEUE_SIZE, NVME_DEFAULT_KATO,
// nvme-cli's connect timeout).
const (
	DefaultIOQueues    = 1
	DefaultQueueDepth  = 128
	DefaultKATO        = 5 * time.Second
	DefaultDialTimeout = 10 * time.Second
	// QueueDepthMax is the largest I/O queue depth: the Linux host's
	// NVMF_MAX_QUEUE_SIZE, and well inside the 12-bit slot index of a CID.
	QueueDepthMax = 1024
	// IOQueuesMax bounds Options.IOQueues (the Linux host asks for one per CPU).
	IOQueuesMax = 128
	// KeepAliveDisabled, as Options.KATO, sends KATO 0 in Connect and no Keep
	// Alive commands (a zero KATO means "use DefaultKATO").
	KeepAliveDisabled time.Duration = -1
	// icrespTimeout bounds the wait for ICResp (the Linux host's sk_rcvtimeo).
	icrespTimeout = 10 * time.Second
	// adminQueueDepth is the admin queue's SQSIZE+1 (NVME_AQ_DEPTH); its last
	// slot is reserved for the Asynchronous Event Request, as in Linux.
	adminQueueDepth = 32
)

// Options configure Dial. The zero value of every field selects its default;
// EnsureDefaults fills them in and Validate reports every invalid field.
type Options struct {
	// HostNQN is sent in every Connect. Default: a UUID-based NQN derived from
	// HostID, the way nvme-cli generates one.
	HostNQN string
	// HostID is the 128-bit host identifier sent in Connect. Default: random
	// (set it when the target checks host identity across connections).
	HostID [16]byte
	// SubNQN is the NQN of the subsystem to connect to. Required by Dial.
	SubNQN string
	// IOQueues is the number of I/O queues, one TCP connection each, that
	// Dial asks for (Set Features Number of Queues may grant fewer).
	// Default 1, at most IOQueuesMax.
	IOQueues int
	// QueueDepth is the number of commands each I/O queue holds in flight;
	// Connect's SQSIZE is QueueDepth-1 after clamping to CAP.MQES+1 and
	// Identify MAXCMD. Default 128, at most QueueDepthMax.
	QueueDepth int
	// KATO is the keep-alive timeout sent in the admin Connect; a Keep Alive
	// is sent every KATO/2. Default 5 s; KeepAliveDisabled turns it off.
	// Rounded to milliseconds on the wire.
	KATO time.Duration
	// HeaderDigest and DataDigest request CRC32C digests in ICReq; every PDU
	// then carries and is checked against them.
	HeaderDigest bool
	DataDigest   bool
	// DialTimeout bounds each TCP connect. Default 10 s. The context passed
	// to Dial bounds the whole sequence.
	DialTimeout time.Duration
	// Logger receives warnings (e.g. a failed SMART log read) and debug
	// messages. Default: discard.
	Logger *slog.Logger
	// Clock drives keep-alive, CSTS polling and handshake timeouts. Default
	// clock.Real().
	Clock clock.Clock
	// DHCHAPSecret is the host's DH-HMAC-CHAP secret ("DHHC-1:..", as
	// nvme connect --dhchap-secret): every queue authenticates with it when
	// the Connect response asks for it. DHCHAPCtrlSecret, when set, makes
	// the controller prove itself too (--dhchap-ctrl-secret). See auth.go.
	DHCHAPSecret, DHCHAPCtrlSecret string
}

// EnsureDefaults replaces zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.HostID == ([16]byte{}) {
		o.HostID = randomUUID()
	}
	if o.HostNQN == "" {
		o.HostNQN = "nqn.2014-08.org.nvmexpress:uuid:" + formatUUID(o.HostID)
	}
	if o.IOQueues == 0 {
		o.IOQueues = DefaultIOQueues
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.KATO == 0 {
		o.KATO = DefaultKATO
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
}

// Validate reports all invalid fields at once. Call it after EnsureDefaults.
func (o *Options) Validate() error {
	var errs []error
	if o.SubNQN == "" {
		errs = append(errs, errors.New("SubNQN is empty"))
	}
	if len(o.SubNQN) >= nvme.NQNMaxSize {
		errs = append(errs, fmt.Errorf("SubNQN is %d bytes, the limit is %d", len(o.SubNQN), nvme.NQNMaxSize-1))
	}
	if len(o.HostNQN) >= nvme.NQNMaxSize {
		errs = append(errs, fmt.Errorf("HostNQN is %d bytes, the limit is %d", len(o.HostNQN), nvme.NQNMaxSize-1))
	}
	if o.IOQueues < 1 || o.IOQueues > IOQueuesMax {
		errs = append(errs, fmt.Errorf("IOQueues %d is outside [1, %d]", o.IOQueues, IOQueuesMax))
	}
	if o.QueueDepth < 2 || o.QueueDepth > QueueDepthMax {
		errs = append(errs, fmt.Errorf("QueueDepth %d is outside [2, %d]", o.QueueDepth, QueueDepthMax))
	}
	if o.KATO != KeepAliveDisabled && (o.KATO < time.Millisecond || o.KATO/time.Millisecond > 0xFFFFFFFF) {
		errs = append(errs, fmt.Errorf("KATO %v is not a millisecond count in [1 ms, 2^32 ms)", o.KATO))
	}
	if o.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("DialTimeout %v is negative", o.DialTimeout))
	}
	errs = append(errs, o.validateDHCHAP()...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
}

// katoMillis is the Connect KATO field.
func (o *Options) katoMillis() uint32 {
	if o.KATO == KeepAliveDisabled {
		return 0
	}
	return uint32(o.KATO / time.Millisecond)
}
