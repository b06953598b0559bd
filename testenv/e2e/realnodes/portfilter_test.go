package realnodes

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/workload"
)

// otherNamespace holds another team's application, published on a node
// port only.
const otherNamespace = "e2e-other-team"

// otherApp is one web pod of that team behind a NodePort Service.
var otherApp = `apiVersion: v1
kind: Namespace
metadata: {name: ` + otherNamespace + `}
---
` + strings.Replace(workload.WebDeployment("internal", 1), "namespace: "+workload.AppNamespace, "namespace: "+otherNamespace, 1) + `---
apiVersion: v1
kind: Service
metadata: {name: internal, namespace: ` + otherNamespace + `}
spec:
  type: NodePort
  selector: {app: internal}
  ports: [{port: 80, targetPort: 8080}]
`

// filteredIP is the address of the Service under test, asked of eip's
// allocator so that the client listens for its announcements before it
// is bound.
var filteredIP = netip.AddrFrom4([4]byte{198, 18, 101, 200})

// filteredApp is the Service under test: the web application on port 80
// at filteredIP, which eip allocates.
var filteredApp = `apiVersion: v1
kind: Service
metadata:
  name: web-filtered
  namespace: ` + workload.AppNamespace + `
  annotations: {eip.io/load-balancer-ips: "` + filteredIP.String() + `"}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`

// An external IP opens only its Service, on real nodes with the kubelet,
// containerd and kube-proxy (nftables mode, nodePortAddresses unset): with
// the address bound on its holder for a LoadBalancer Service on port 80,
// the client's HTTP to it on 80 is answered by the web pods, while TCP to
// the holder's kubelet (10250), to a listener on the holder's 22 and to
// another namespace's node port fails on it, though each answers on the
// node's own address. ARP is untouched: the holder announces the address
// when it binds it (gratuitous ARP), and it alone answers the client's
// ARP requests for it. Deleting the Service takes the address out of the
// holder's port filter.
func TestPortFilterOnRealNodes(t *testing.T) {
	installed(t)
	ctx := ctxFor(t, 5*time.Minute)
	k := cluster.Client()
	must(t, cluster.Apply(ctx, []byte(otherApp)))
	t.Cleanup(func() { cleanup(t, "delete", "namespace", otherNamespace, "--wait=false") })
	kubectl(t, "-n", otherNamespace, "rollout", "status", "deployment/internal", "--timeout=3m")
	internal, err := k.CoreV1().Services(otherNamespace).Get(ctx, "internal", metav1.GetOptions{})
	must(t, err)
	nodePort := strconv.Itoa(int(internal.Spec.Ports[0].NodePort))

	announced, err := cluster.ListenAnnouncements(testenv.Client, filteredIP)
	must(t, err)
	must(t, cluster.Apply(ctx, []byte(filteredApp)))
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			cleanup(t, "-n", workload.AppNamespace, "delete", "service", "web-filtered")
		}
	})
	var ip netip.Addr
	eventually(t, "web-filtered gets an address", time.Minute, func() (bool, string) {
		svc, err := k.CoreV1().Services(workload.AppNamespace).Get(ctx, "web-filtered", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				ip = a
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", svc.Status.LoadBalancer)
	})
	if ip != filteredIP {
		t.Fatalf("web-filtered got %s, not the %s it asked for", ip, filteredIP)
	}
	h := served(t, ip)
	node, err := cluster.Node(h)
	must(t, err)
	mac, err := cluster.NodeMAC(h)
	must(t, err)
	heard, err := announced.Count(3 * time.Second)
	must(t, err)
	if len(heard) != 1 || heard[mac.String()] == 0 {
		t.Errorf("gratuitous ARP for %s from %v; want from its holder %s (%s) alone", ip, heard, h, mac)
	}
	answers, err := cluster.WhoAnswers(ip)
	must(t, err)
	if len(answers) != 1 || answers[0].String() != mac.String() {
		t.Errorf("ARP for %s answered by %v; want its holder %s (%s) alone", ip, answers, h, mac)
	}
	t.Logf("%s on %s (%s): gratuitous ARP %v, ARP answered by %v", ip, h, mac, heard, answers)
	ssh, err := cluster.ListenTCP(h, 22)
	must(t, err)
	defer ssh.Close()
	go func() {
		for {
			c, err := ssh.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-e2e\n"))
			_ = c.Close()
		}
	}()

	hc := cluster.ClientHTTP()
	hc.Timeout = 2 * time.Second
	httpOK := func(addr string) error {
		resp, err := hc.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", addr, resp.Status)
		}
		return nil
	}
	// TCP from the client: nil when the connection is accepted (and, for
	// the listener, it says hello).
	dial := func(addr string) error {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := cluster.DialTCP(dctx, testenv.Client, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if strings.HasSuffix(addr, ":22") {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, err = bufio.NewReader(c).ReadString('\n')
		}
		return err
	}
	own := node.IPv4.String()
	eventually(t, "the other team's node port on "+h, time.Minute, func() (bool, string) {
		err := httpOK(net.JoinHostPort(own, nodePort))
		return err == nil, fmt.Sprint(err)
	})
	for _, port := range []string{"22", "10250"} {
		must(t, dial(net.JoinHostPort(own, port)))
	}
	eventually(t, "HTTP to "+ip.String()+":80", time.Minute, func() (bool, string) {
		err := httpOK(net.JoinHostPort(ip.String(), "80"))
		return err == nil, fmt.Sprint(err)
	})
	for _, port := range []string{"22", "10250", nodePort} {
		if err := dial(net.JoinHostPort(ip.String(), port)); err == nil {
			t.Errorf("TCP to %s:%s (on %s) was accepted; want only the Service's port 80", ip, port, h)
		} else {
			t.Logf("TCP to %s:%s: %v", ip, port, err)
		}
	}

	// The filter, and nothing else, closed them: with port-filter off
	// each answers on the external IP.
	setPortFilter(t, "off")
	t.Cleanup(func() {
		if err := portFilter(context.Background(), "on"); err != nil {
			t.Errorf("port-filter on again: %v", err)
		}
	})
	for _, port := range []string{"22", "10250", nodePort} {
		addr := net.JoinHostPort(ip.String(), port)
		eventually(t, "TCP to "+addr+" with port-filter off", time.Minute, func() (bool, string) {
			err := dial(addr)
			return err == nil, fmt.Sprint(err)
		})
	}
	setPortFilter(t, "on")

	inTable := regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(ip.String()) + `([^0-9]|$)`)
	table := func() string {
		out, err := cluster.Exec(ctx, h, "nft", "list", "table", "inet", "eip-ports")
		must(t, err)
		return string(out)
	}
	eventually(t, ip.String()+" in "+h+"'s port filter again", time.Minute, func() (bool, string) {
		out := table()
		return inTable.MatchString(out), out
	})
	kubectl(t, "-n", workload.AppNamespace, "delete", "service", "web-filtered")
	deleted = true
	eventually(t, ip.String()+" out of "+h+"'s port filter", time.Minute, func() (bool, string) {
		out := table()
		return !inTable.MatchString(out), out
	})
}

// setPortFilter sets eip-config's port-filter.
func setPortFilter(t *testing.T, value string) {
	t.Helper()
	must(t, portFilter(ctxFor(t, time.Minute), value))
}

func portFilter(ctx context.Context, value string) error {
	cms := cluster.Client().CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(ctx, testenv.ConfigMap, metav1.GetOptions{})
	if err != nil || cm.Data["port-filter"] == value {
		return err
	}
	cm.Data["port-filter"] = value
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// cleanup runs kubectl as cluster admin in a test's cleanup, where a
// failure is reported, not fatal.
func cleanup(t *testing.T, args ...string) {
	if out, err := cluster.Kubectl(context.Background(), args...); err != nil {
		t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
