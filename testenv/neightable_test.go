package testenv

import "testing"

func TestNeighEntries(t *testing.T) {
	for _, c := range []struct{ endpoints, ips, want int }{
		{5, 100, 120},    // 3 nodes, the control plane and the client
		{52, 100, 2752},  // 50 nodes: more than the default gc_thresh3 of 1,024
		{53, 0, 53 * 52}, // with the router
	} {
		if got := NeighEntries(c.endpoints, c.ips); got != c.want {
			t.Errorf("NeighEntries(%d, %d) = %d, want %d", c.endpoints, c.ips, got, c.want)
		}
	}
}

func TestDescribeNeighChanges(t *testing.T) {
	if got := describeNeighChanges(120, nil); got != "" {
		t.Errorf("nothing changed: %q, want empty", got)
	}
	got := describeNeighChanges(2752, []neighChange{{key: "net.ipv4.neigh.default.gc_thresh3", from: 1024, to: 5504}})
	want := "up to 2752 neighbour entries per family needed; raised for the run: net.ipv4.neigh.default.gc_thresh3 1024 → 5504"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
