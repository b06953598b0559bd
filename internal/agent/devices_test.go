package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// refusingDevices opens its first device and refuses every other.
type refusingDevices struct{ tries int }

func (d *refusingDevices) Name(i int) (string, error) {
	if i == 0 {
		return "eipd0", nil
	}
	d.tries++
	return "", errors.New("open tun: no more devices")
}
func (d *refusingDevices) Owns(iface string) bool            { return iface == "eipd0" }
func (d *refusingDevices) Ensure(iface string) (bool, error) { return false, nil }

// When no second device can be opened, the addresses past the first
// device's share go on it, and the failure is said once, not once per
// address: a mass failover binds thousands. It is tried again after
// reopenAfter, and said again if it fails again.
func TestAddressDevicesSayAFailedOpenOnce(t *testing.T) {
	d := addressDevices{count: map[string]int{}}
	devs := &refusingDevices{}
	t0 := time.Unix(1000, 0)
	errs := 0
	pick := func(now time.Time) {
		dev, err := d.pick(devs, now)
		assert.Equal(t, dev, "eipd0")
		if err != nil {
			errs++
		}
		d.added(dev)
	}
	for i := range perDevice + 1000 {
		pick(t0.Add(time.Duration(i) * time.Millisecond))
	}
	assert.Equal(t, errs, 1)
	assert.Equal(t, devs.tries, 1)
	pick(t0.Add(reopenAfter + 2*time.Second))
	assert.Equal(t, fmt.Sprint(errs, devs.tries), "2 2")
}
