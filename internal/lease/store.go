package lease

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/kubeclient"
)

// Store writes Leases in one namespace. It is the only code that sends
// Lease writes to the API server; reads come from the informer cache.
type Store struct {
	leases  kubeclient.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	written Written
}

// Written is told of every write a Store sends, whatever its outcome: the
// role of the Lease (RoleLock or RoleHeartbeat) and the operation (OpCreate,
// OpUpdate or OpDelete).
type Written func(role, op string)

// The operations a Store tells Written of.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
)

// NewStore returns a Store writing Leases of namespace, telling written
// (if not nil) of each write.
func NewStore(c kubeclient.Interface, namespace string, written Written) *Store {
	if written == nil {
		written = func(string, string) {}
	}
	return &Store{leases: c.Leases(namespace), written: written}
}

// roleOf is the role of the Lease name: only heartbeats have their prefix.
func roleOf(name string) string {
	if _, ok := NodeOf(name); ok {
		return RoleHeartbeat
	}
	return RoleLock
}

// Create creates l; an AlreadyExists error means another node won.
func (s *Store) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	s.written(roleOf(l.Name), OpCreate)
	out, err := s.leases.Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create lease %s: %w", l.Name, err)
	}
	return withoutManagedFields(out), nil
}

// Update writes l on the precondition of its resourceVersion; a Conflict
// error means someone wrote in between.
func (s *Store) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if l.ResourceVersion == "" {
		return nil, fmt.Errorf("update lease %s: no resourceVersion to use as precondition", l.Name)
	}
	s.written(roleOf(l.Name), OpUpdate)
	out, err := s.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update lease %s: %w", l.Name, err)
	}
	return withoutManagedFields(out), nil
}

// Delete deletes the Lease name if it is still at resourceVersion rv.
func (s *Store) Delete(ctx context.Context, name, rv string) error {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
	s.written(roleOf(name), OpDelete)
	if err := s.leases.Delete(ctx, name, opts); err != nil {
		return fmt.Errorf("delete lease %s: %w", name, err)
	}
	return nil
}

// Get reads the Lease name from the API server, bypassing any cache.
func (s *Store) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	out, err := s.leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get lease %s: %w", name, err)
	}
	return withoutManagedFields(out), nil
}

// withoutManagedFields drops l's managedFields, often larger than the rest
// of a Lease: the agent keeps each Lease it wrote until its cache shows it
// (thousands at a cold start) and writes the next update from it, like the
// cache, whose informers drop them too. An update whose managedFields are
// unset leaves the API server's unchanged.
func withoutManagedFields(l *coordinationv1.Lease) *coordinationv1.Lease {
	l.ManagedFields = nil
	return l
}
