package cli

import (
	"io"
	"net/netip"

	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// The listed objects are read from their protobuf encoding field by field,
// keeping only what status reads: the generated Unmarshal of a whole Lease
// or Service allocates every field, managedFields and all, and a lock kept
// as a Lease holds two maps. At 10,000 IPs on 3 nodes decoding was about
// half of the plugin's CPU, much of it the page faults of a heap growing
// from nothing. The objects kept are therefore partial, fit to be read and
// never to be written back.

// Field numbers in k8s.io/api's and apimachinery's generated.proto.
const (
	objectMetadata = 1 // Lease, Service
	objectSpec     = 2
	objectStatus   = 3 // Service

	metaName            = 1
	metaNamespace       = 3
	metaUID             = 5
	metaResourceVersion = 6
	metaCreation        = 8
	metaLabels          = 11
	metaAnnotations     = 12

	mapKey   = 1
	mapValue = 2

	serviceSpecPorts             = 1
	serviceSpecType              = 4
	serviceSpecExternalIPs       = 5
	serviceSpecLoadBalancerClass = 21
	serviceSpecExternalTraffic   = 11
	serviceStatusLoadBalancer    = 1
	loadBalancerIngress          = 1
	ingressIP                    = 1
	servicePortProtocol          = 2
	servicePortPort              = 3
)

// readLeaseList reads a list of eip's Leases. Each is decoded into one
// Lease used again for the next, its name, namespace, resourceVersion,
// labels, annotations and spec; a valid lock is kept only as the
// lease.Lock that lease.ParseLock reads from it, by IP, anything else
// (heartbeats, damaged locks) as a copy of the Lease.
func readLeaseList(r io.Reader) ([]*coordinationv1.Lease, map[netip.Addr]*lease.Lock, error) {
	var (
		others []*coordinationv1.Lease
		locks  = map[netip.Addr]*lease.Lock{}
		slab   []lease.Lock // where the locks are, a few hundred at a time
		l      coordinationv1.Lease
		in     = interner{}
	)
	err := eachItem(r, func(b []byte) error {
		clear(l.Labels)
		clear(l.Annotations)
		l.Name, l.Namespace, l.ResourceVersion, l.Spec = "", "", "", coordinationv1.LeaseSpec{}
		err := eachBytesField(b, func(field protowire.Number, v []byte) error {
			switch field {
			case objectMetadata:
				return decodeMeta(v, &l.ObjectMeta, in, true)
			case objectSpec:
				return l.Spec.Unmarshal(v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if l.Labels[lease.ManagedByLabel] == lease.ManagedBy && l.Labels[lease.RoleLabel] == lease.RoleLock {
			if lk, err := lease.ParseLock(&l); err == nil {
				if len(slab) == cap(slab) {
					slab = make([]lease.Lock, 0, 256)
				}
				slab = append(slab, lk)
				locks[lk.IP] = &slab[len(slab)-1]
				return nil
			}
		}
		others = append(others, l.DeepCopy())
		return nil
	})
	return others, locks, err
}

// readServiceList reads a list of Services as the claims each makes,
// decoding each into one Service used again for the next: its name,
// namespace, creationTimestamp, sharing key and consent to share, type,
// ports (protocol and number), externalIPs, loadBalancerClass and
// externalTrafficPolicy, and the IPs of its load balancer's ingress:
// whatever ipset.EachIP puts in a claim.
func readServiceList(r io.Reader) ([]ipset.Claim, error) {
	var (
		out []ipset.Claim
		s   corev1.Service
		in  = interner{}
	)
	add := func(c ipset.Claim) { out = append(out, c) }
	err := eachItem(r, func(b []byte) error {
		s.Name, s.Namespace, s.Spec.Type, s.Spec.LoadBalancerClass, s.Spec.ExternalTrafficPolicy = "", "", "", nil, ""
		s.CreationTimestamp, s.UID = metav1.Time{}, ""
		clear(s.Annotations)
		s.Spec.ExternalIPs, s.Status.LoadBalancer.Ingress = s.Spec.ExternalIPs[:0], s.Status.LoadBalancer.Ingress[:0]
		s.Spec.Ports = s.Spec.Ports[:0]
		err := eachBytesField(b, func(field protowire.Number, v []byte) error {
			switch field {
			case objectMetadata:
				return decodeServiceMeta(v, &s.ObjectMeta, in)
			case objectSpec:
				return eachBytesField(v, func(field protowire.Number, v []byte) error {
					switch field {
					case serviceSpecPorts:
						p, err := decodePort(v, in)
						s.Spec.Ports = append(s.Spec.Ports, p)
						return err
					case serviceSpecType:
						s.Spec.Type = corev1.ServiceType(in.get(v))
					case serviceSpecExternalIPs:
						s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, string(v))
					case serviceSpecLoadBalancerClass:
						class := in.get(v)
						s.Spec.LoadBalancerClass = &class
					case serviceSpecExternalTraffic:
						s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(in.get(v))
					}
					return nil
				})
			case objectStatus:
				return eachNested(v, []protowire.Number{serviceStatusLoadBalancer, loadBalancerIngress}, func(v []byte) error {
					ing := corev1.LoadBalancerIngress{}
					err := eachBytesField(v, func(field protowire.Number, v []byte) error {
						if field == ingressIP {
							ing.IP = string(v)
						}
						return nil
					})
					s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, ing)
					return err
				})
			}
			return nil
		})
		if err == nil {
			ipset.EachIP(ipset.ServiceOf(&s), add)
		}
		return err
	})
	return out, err
}

// decodePort reads the protocol and port of a Service's port, all that
// sharing an address across namespaces compares.
func decodePort(b []byte, in interner) (corev1.ServicePort, error) {
	var p corev1.ServicePort
	err := eachMessageField(b, func(field protowire.Number, wire protowire.Type, v []byte, x uint64) error {
		switch {
		case field == servicePortProtocol && wire == protowire.BytesType:
			p.Protocol = corev1.Protocol(in.get(v))
		case field == servicePortPort && wire == protowire.VarintType:
			p.Port = int32(x)
		}
		return nil
	})
	return p, err
}

// eachNested calls fn with each value of the field path names, a field
// of a message field of b, and so on.
func eachNested(b []byte, path []protowire.Number, fn func(v []byte) error) error {
	return eachBytesField(b, func(field protowire.Number, v []byte) error {
		switch {
		case field != path[0]:
			return nil
		case len(path) == 1:
			return fn(v)
		}
		return eachNested(v, path[1:], fn)
	})
}

// decodeMeta reads the name, namespace and resourceVersion of an object's
// metadata, and with maps its labels and annotations.
func decodeMeta(b []byte, m *metav1.ObjectMeta, in interner, maps bool) error {
	return eachBytesField(b, func(field protowire.Number, v []byte) error {
		switch field {
		case metaName:
			m.Name = string(v)
		case metaNamespace:
			m.Namespace = in.get(v)
		case metaResourceVersion:
			m.ResourceVersion = string(v)
		case metaLabels:
			if maps {
				return decodeEntry(v, &m.Labels, in, in.get)
			}
		case metaAnnotations:
			if maps {
				return decodeEntry(v, &m.Annotations, in, copyString)
			}
		}
		return nil
	})
}

// decodeServiceMeta reads what ipset.EachIP reads of a Service's metadata:
// its name and namespace, UID, creationTimestamp, sharing key, consent
// to share and preferred nodes.
func decodeServiceMeta(b []byte, m *metav1.ObjectMeta, in interner) error {
	if err := decodeMeta(b, m, in, false); err != nil {
		return err
	}
	return eachBytesField(b, func(field protowire.Number, v []byte) error {
		switch field {
		case metaUID:
			m.UID = types.UID(v)
		case metaCreation:
			return m.CreationTimestamp.Unmarshal(v)
		case metaAnnotations:
			k, val, err := mapEntry(v)
			if key := string(k); err == nil && (key == ipset.AnnotationSharingKey || key == ipset.AnnotationShareWith || key == ipset.AnnotationPreferredNodes) {
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[key] = string(val)
			}
			return err
		}
		return nil
	})
}

// decodeEntry adds one entry of a map<string, string> to *m: its key
// interned, its value made by value.
func decodeEntry(b []byte, m *map[string]string, in interner, value func([]byte) string) error {
	k, v, err := mapEntry(b)
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[in.get(k)] = value(v)
	return nil
}

// mapEntry is the key and value of b, one entry of a map<string, string>.
func mapEntry(b []byte) (k, v []byte, err error) {
	err = eachBytesField(b, func(field protowire.Number, b []byte) error {
		switch field {
		case mapKey:
			k = b
		case mapValue:
			v = b
		}
		return nil
	})
	return k, v, err
}

// copyString is b as a string of its own.
func copyString(b []byte) string { return string(b) }

// eachBytesField calls fn with the number and value of each
// length-delimited field of the message b, in order, and skips the others.
// The value is b's own memory.
func eachBytesField(b []byte, fn func(field protowire.Number, v []byte) error) error {
	return eachMessageField(b, func(field protowire.Number, wire protowire.Type, v []byte, _ uint64) error {
		if wire != protowire.BytesType {
			return nil
		}
		return fn(field, v)
	})
}

// eachMessageField calls fn with each field of the message b: with its bytes
// when it is length-delimited, with its value when it is a varint, and
// with neither otherwise.
func eachMessageField(b []byte, fn func(field protowire.Number, wire protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		field, wire, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch wire {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(field, wire, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(field, wire, v, x); err != nil {
			return err
		}
	}
	return nil
}

// interner hands out one string for equal bytes: the namespaces, types and
// label and annotation keys that most items of a list share.
type interner map[string]string

func (in interner) get(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	in[s] = s
	return s
}
