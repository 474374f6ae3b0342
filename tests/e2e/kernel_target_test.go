package e2e

import (
	"testing"
	"time"
)

// TestKernelHostAgainstKernelTarget runs the acceptance flows against the
// Linux kernel's own target (nvmet-tcp on the guest's 127.0.0.1). It proves
// the harness and the flows themselves: if this fails, the harness is broken,
// not basaltd. The target "dies" by unlinking its only subsystem from the
// port (connections torn down, new ones refused) and comes back by relinking.
func TestKernelHostAgainstKernelTarget(t *testing.T) {
	tg := target{
		addr:      "127.0.0.1",
		port:      4420,
		nsBytes:   128 << 20,
		blockSize: 512, // brd
		portID:    1,
	}
	script := GuestScript(tg.vars(), []string{"hostflow.sh", "failover.sh", "nvmet.sh"},
		"nvmet_setup\nhost_flow\nfailover_flow\n")
	r := Boot(t, BootOptions{Script: script, Timeout: 5 * time.Minute})
	RequireOK(t, r)
	checkHostFlow(t, r.Console, tg)
	checkFailover(t, r.Console)
	CheckDmesg(t, r.Console, tg.dmesgAllow())
}
