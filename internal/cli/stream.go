package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// lists reads the two lists that grow with the number of IPs: eip's
// Leases, the valid locks among them possibly already parsed, and every
// Service, or the IPs the Services name.
type lists interface {
	leases(ctx context.Context, namespace string, opts metav1.ListOptions) ([]*coordinationv1.Lease, map[netip.Addr]*lease.Lock, error)
	services(ctx context.Context, opts metav1.ListOptions) ([]*corev1.Service, []ipset.Claim, error)
}

// streamed reads them item by item as the API server sends them. client-go's
// List reads a whole response into one buffer it grows by doubling, copies it
// once more to unwrap it, then decodes every item: at 10,000 IPs on the test
// bed the plugin touched about 75 MB of fresh memory for two lists of about
// 10 MB each, and the page faults alone cost it 0.2-0.4 s of CPU. Here each
// item is read from a buffer used again for the next, and only the fields
// status reads are decoded (see readLeases and readServices).
type streamed struct{ c kubernetes.Interface }

func (s streamed) leases(ctx context.Context, namespace string, opts metav1.ListOptions) (others []*coordinationv1.Lease, locks map[netip.Addr]*lease.Lock, err error) {
	req := s.c.CoordinationV1().RESTClient().Get().Namespace(namespace).Resource("leases")
	err = streamList(ctx, req, opts, func(r io.Reader) (err error) {
		others, locks, err = readLeaseList(r)
		return err
	})
	return others, locks, err
}

func (s streamed) services(ctx context.Context, opts metav1.ListOptions) (_ []*corev1.Service, ips []ipset.Claim, err error) {
	err = streamList(ctx, s.c.CoreV1().RESTClient().Get().Resource("services"), opts, func(r io.Reader) (err error) {
		ips, err = readServiceList(r)
		return err
	})
	return nil, ips, err
}

// streamList sends the list request req with opts and has read read the
// answer.
func streamList(ctx context.Context, req *rest.Request, opts metav1.ListOptions, read func(io.Reader) error) error {
	body, err := req.VersionedParams(&opts, scheme.ParameterCodec).SetHeader("Accept", runtime.ContentTypeProtobuf).Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := read(body); err != nil {
		return fmt.Errorf("read the list: %w", err)
	}
	return nil
}

// protobufMagic starts every protobuf-encoded object the API server sends;
// a runtime.Unknown follows, whose raw bytes are the list.
var protobufMagic = []byte("k8s\x00")

// Field numbers of runtime.Unknown and of every *List type.
const (
	unknownRaw             = 2
	unknownContentEncoding = 3
	listItems              = 2
)

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// eachItem reads one list in the API server's protobuf encoding from r and
// calls fn with each item's encoding in turn. The bytes are valid only
// until fn returns.
func eachItem(r io.Reader, fn func(item []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(protobufMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !bytes.Equal(magic, protobufMagic) {
		return errors.New("the answer is not in protobuf")
	}
	var buf []byte
	sawList := false
	// The envelope, a runtime.Unknown, runs to the end of the answer.
	err := eachField(&limited{r: br, toEnd: true}, func(field uint64, n int64) (bool, error) {
		switch field {
		case unknownContentEncoding:
			if n > 0 {
				return false, errors.New("the list has a content encoding")
			}
			return true, nil
		case unknownRaw:
			sawList = true
			// The list: its ListMeta, then the items.
			list := &limited{r: br, n: n}
			return true, eachField(list, func(field uint64, m int64) (bool, error) {
				if field != listItems {
					return false, nil
				}
				var err error
				if buf, err = readItem(list, m, buf[:0]); err != nil {
					return true, truncated(err)
				}
				return true, fn(buf)
			})
		}
		return false, nil
	})
	if err == nil && !sawList {
		err = errors.New("the answer holds no list")
	}
	return err
}

// readItem reads the next n bytes of r into buf. A length is only a claim
// until the bytes come, so buf grows as they arrive: an answer that claims
// a gigabyte and ends after a few bytes costs no gigabyte.
func readItem(r io.Reader, n int64, buf []byte) ([]byte, error) {
	if int64(cap(buf)) >= n {
		buf = buf[:n]
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	b := bytes.NewBuffer(buf)
	_, err := io.CopyN(b, r, n)
	return b.Bytes(), err
}

// eachField reads the fields of one message from r to its end. It hands each
// length-delimited field's number and length to fn, which either reads the
// value from r and returns true, or returns false to have it skipped; it
// skips fields of other wire types.
func eachField(r *limited, fn func(field uint64, n int64) (read bool, err error)) error {
	for {
		field, wire, err := readTag(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if wire == wireBytes {
			n, err := readLen(r)
			if err != nil {
				return err
			}
			read, err := fn(field, n)
			if err != nil {
				return err
			}
			if read {
				continue
			}
			if _, err := io.CopyN(io.Discard, r, n); err != nil {
				return truncated(err)
			}
			continue
		}
		if err := skip(r, wire); err != nil {
			return err
		}
	}
}

// limited reads one message from r: the next n bytes, or with toEnd all
// that is left. It ends with io.EOF at the message's end, and with
// io.ErrUnexpectedEOF if r ends first.
type limited struct {
	r     *bufio.Reader
	n     int64
	toEnd bool
}

func (l *limited) ReadByte() (byte, error) {
	if l.n <= 0 && !l.toEnd {
		return 0, io.EOF
	}
	b, err := l.r.ReadByte()
	if err != nil {
		return 0, l.cut(err)
	}
	l.n--
	return b, nil
}

func (l *limited) Read(p []byte) (int, error) {
	if !l.toEnd {
		if l.n <= 0 {
			return 0, io.EOF
		}
		p = p[:min(int64(len(p)), l.n)]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	return k, l.cut(err)
}

// cut: r ended where the message had not.
func (l *limited) cut(err error) error {
	if err == io.EOF && !l.toEnd {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readTag reads a field's key; io.EOF when the input ends before it.
func readTag(r io.ByteReader) (field uint64, wire byte, err error) {
	k, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, 0, err
	}
	return k >> 3, byte(k & 7), nil
}

// readLen reads the length of a length-delimited field.
func readLen(r io.ByteReader) (int64, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, truncated(err)
	}
	if n > 1<<31-1 {
		return 0, fmt.Errorf("a field of %d bytes", n)
	}
	return int64(n), nil
}

// skip reads past the value of a field of wire type wire, not
// length-delimited.
func skip(r *limited, wire byte) error {
	var n int64
	switch wire {
	case wireVarint:
		_, err := binary.ReadUvarint(r)
		return truncated(err)
	case wireFixed64:
		n = 8
	case wireFixed32:
		n = 4
	default:
		return fmt.Errorf("unknown protobuf wire type %d", wire)
	}
	_, err := io.CopyN(io.Discard, r, n)
	return truncated(err)
}

// truncated: the input ended inside a field.
func truncated(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
