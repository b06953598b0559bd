package agent

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
}

// pick is the device for one more address: the first with room, opened
// if need be. If another cannot be opened, it is the first device, which
// works, only slower to add to.
func (d *addressDevices) pick(devs Devices) (string, error) {
	for i := 0; ; i++ {
		name, err := devs.Name(i)
		if err != nil {
			first, _ := devs.Name(0)
			return first, err
		}
		if d.count[name] < perDevice {
			return name, nil
		}
	}
}

func (d *addressDevices) added(dev string) { d.count[dev]++ }

func (d *addressDevices) removed(dev string) {
	if d.count[dev]--; d.count[dev] <= 0 {
		delete(d.count, dev)
	}
}
