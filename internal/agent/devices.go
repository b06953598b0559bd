package agent

import "time"

// perDevice is how many addresses eipd puts on one of its devices.
const perDevice = 256

// addressDevices spreads the addresses that live on eipd's devices
// (placeOnDevice) over them, at most perDevice on each, filling the
// lowest-numbered device with room first. The kernel walks a device's
// whole list of IPv4 addresses on each add, under the routing lock that
// every network namespace shares: a node taking over 1,700 IPs with 3,300
// already on one device spent most of each bind waiting for that lock,
// held by the walks of the other survivors as much as by its own.
type addressDevices struct {
	count map[string]int // addresses on each device
	// opened is how many devices were opened; refused is when the next
	// one last could not be: until reopenAfter later the addresses past
	// the open devices' room go on the first without trying again.
	opened  int
	refused time.Time
}

// reopenAfter is how long a device that could not be opened is not tried
// again: a mass failover binds thousands of addresses, and each would
// try, and warn, in turn.
const reopenAfter = time.Minute

// pick is the device for one more address: the first with room, opened
// if need be. If another cannot be opened, it is the first device, which
// works, only slower to add to; the error says so once, and not again
// until another try fails, reopenAfter later.
func (d *addressDevices) pick(devs Devices, now time.Time) (string, error) {
	for i := 0; ; i++ {
		name, err := d.name(devs, i, now)
		if err != nil || name == "" {
			first, _ := devs.Name(0)
			return first, err
		}
		if d.count[name] < perDevice {
			return name, nil
		}
	}
}

// name is the i-th device's, or "" if it is not open and may not be
// tried yet.
func (d *addressDevices) name(devs Devices, i int, now time.Time) (string, error) {
	if i >= d.opened && !d.refused.IsZero() && now.Before(d.refused.Add(reopenAfter)) {
		return "", nil
	}
	name, err := devs.Name(i)
	if err != nil {
		d.refused = now
	} else {
		d.opened = max(d.opened, i+1)
	}
	return name, err
}

func (d *addressDevices) added(dev string) { d.count[dev]++ }

func (d *addressDevices) removed(dev string) {
	if d.count[dev]--; d.count[dev] <= 0 {
		delete(d.count, dev)
	}
}
