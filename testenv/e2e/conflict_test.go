package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/testenv"
)

// A Service names an address that another LAN host already uses (issue
// 14, (a)): eip probes before binding it, never binds it, says why in a
// Warning event naming the host's MAC, and only the host answers for it
// throughout; once the host drops the address, eip binds it within a few
// seconds. The control-plane namespace plays the LAN host.
func TestAddressInUseOnTheLANIsNotBound(t *testing.T) {
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(172)
	hostAddr := ip.String() + "/16"
	_, err := cluster.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "add", hostAddr, "dev", "eth0")
	e.must(err)
	dropped := false
	t.Cleanup(func() {
		if !dropped {
			_, _ = cluster.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "del", hostAddr, "dev", "eth0")
		}
	})
	macs, err := cluster.WhoAnswers(ip)
	e.must(err)
	assert.Equal(t, len(macs), 1, "the LAN host answers for %s: %v", ip, macs)
	hostMAC := macs[0]

	created := time.Now()
	e.service("inuse", ip)
	msg := e.warningSince("Service", "inuse", "AddressConflict", created, ip.String(), hostMAC.String())
	t.Logf("event: %s", msg)
	e.throughout(ip.String()+" answered by the LAN host alone", 2*leaseDuration, func() string {
		if on := e.boundOn(ip); len(on) > 0 {
			return fmt.Sprintf("bound on %v", on)
		}
		macs, err := cluster.WhoAnswers(ip)
		if err != nil {
			return err.Error()
		}
		if len(macs) != 1 || !bytes.Equal(macs[0], hostMAC) {
			return fmt.Sprintf("answered by %v", macs)
		}
		return ""
	})

	_, err = cluster.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "del", hostAddr, "dev", "eth0")
	e.must(err)
	dropped = true
	freed := time.Now()
	holder := e.served(ip)
	t.Logf("bound on %s %s after the host dropped it", holder, time.Since(freed).Round(time.Millisecond))
	e.warningSince("Service", "inuse", "AddressConflict", created, hostMAC.String()) // still on record
}
