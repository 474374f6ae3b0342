package host

import (
	"context"
	"errors"
	"fmt"

	"basalt/pkg/nvme"
)

// Discovery log reading parameters (libnvme nvmf_get_discovery_log,
// nvme-cli MAX_DISC_RETRIES).
const (
	discoveryRetries    = 10
	discoveryHeaderRead = 0x100 // libnvme 1.3 reads the first 256 bytes
	logChunkSize        = 4096  // NVME_LOG_PAGE_PDU_SIZE
	// discoveryRecordsMax bounds the log size the host will read (4 MiB).
	discoveryRecordsMax = 4095
)

// ErrDiscoveryChanged: the discovery log kept changing (GENCTR) while it was
// read, or its record count changed.
var ErrDiscoveryChanged = errors.New("host: discovery log changed while reading")

// DialDiscovery connects to the discovery controller at addr the way
// `nvme discover` does: admin queue only, SUBNQN
// nqn.2014-08.org.nvmexpress.discovery, KATO 0 (no keep-alive). hostNQN may be
// empty for a generated one. For a persistent discovery controller, Dial with
// SubNQN nvme.DiscoveryNQN and a KATO.
func DialDiscovery(ctx context.Context, addr, hostNQN string) (*Controller, error) {
	return Dial(ctx, addr, Options{HostNQN: hostNQN, SubNQN: nvme.DiscoveryNQN, KATO: KeepAliveDisabled})
}

// DiscoveryLog reads the discovery log page (LID 70h) like libnvme: the
// first 256 bytes of the header (RAE 1); then header and all NUMREC entries
// in 4 KiB chunks at increasing offsets (RAE 1 except on the last chunk);
// then the 1024-byte header again (RAE 1). If GENCTR changed it starts over,
// at most 10 times; a NUMREC that changed is an error too.
func (c *Controller) DiscoveryLog(ctx context.Context) ([]nvme.DiscoveryLogEntry, error) {
	hdr := make([]byte, nvme.DiscoveryLogHeaderSize)
	if err := c.getLogPage(ctx, nvme.LogDiscovery, 0, 0, true, 0, hdr[:discoveryHeaderRead]); err != nil {
		return nil, fmt.Errorf("host: reading the discovery log header: %w", err)
	}
	var log []byte
	var numrec uint64
	for retries := 0; ; retries++ {
		var genctr uint64
		genctr, numrec = nvme.DecodeDiscoveryLogHeader(hdr)
		if numrec == 0 {
			return nil, nil
		}
		if numrec > discoveryRecordsMax {
			return nil, protocolErrorf(0, "discovery log claims %d records", numrec)
		}
		log = make([]byte, nvme.DiscoveryLogHeaderSize+int(numrec)*nvme.DiscoveryLogEntrySize)
		if err := c.readLogChunks(ctx, nvme.LogDiscovery, log, false); err != nil {
			return nil, fmt.Errorf("host: reading the discovery log: %w", err)
		}
		genctr, _ = nvme.DecodeDiscoveryLogHeader(log)
		if err := c.getLogPage(ctx, nvme.LogDiscovery, 0, 0, true, 0, hdr); err != nil {
			return nil, fmt.Errorf("host: re-reading the discovery log header: %w", err)
		}
		now, _ := nvme.DecodeDiscoveryLogHeader(hdr)
		if now == genctr {
			break
		}
		if retries+1 >= discoveryRetries {
			return nil, fmt.Errorf("%w: genctr mismatch after %d tries", ErrDiscoveryChanged, discoveryRetries)
		}
	}
	if _, now := nvme.DecodeDiscoveryLogHeader(hdr); now != numrec {
		return nil, fmt.Errorf("%w: could only fetch %d of %d records", ErrDiscoveryChanged, numrec, now)
	}
	entries := make([]nvme.DiscoveryLogEntry, numrec)
	for i := range entries {
		off := nvme.DiscoveryLogHeaderSize + i*nvme.DiscoveryLogEntrySize
		entries[i] = nvme.UnmarshalDiscoveryLogEntry(log[off:])
	}
	return entries, nil
}

// readLogChunks reads a log page into buf in logChunkSize pieces at
// increasing offsets; RAE is set on every piece but the last, which gets rae
// (libnvme __nvme_get_log_page).
func (c *Controller) readLogChunks(ctx context.Context, lid uint8, buf []byte, rae bool) error {
	for off := 0; off < len(buf); {
		n := min(len(buf)-off, logChunkSize)
		retain := rae || off+n < len(buf)
		if err := c.getLogPage(ctx, lid, 0, 0, retain, uint64(off), buf[off:off+n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}
