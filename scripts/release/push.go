package main

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/eip-project/eip/internal/image"
)

// pushImage pushes the image index of an archive `make image` wrote to ref,
// as the user REGISTRY_USER with REGISTRY_PASSWORD when they are set;
// insecure speaks plain HTTP.
func pushImage(archive, ref string, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	dir, err := os.MkdirTemp("", "eip-release-push-")
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	defer os.RemoveAll(dir)
	idx, _, err := image.Open(archive, dir)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	auth := authn.Anonymous
	if u := os.Getenv("REGISTRY_USER"); u != "" {
		auth = &authn.Basic{Username: u, Password: os.Getenv("REGISTRY_PASSWORD")}
	}
	if err := remote.WriteIndex(r, idx, remote.WithAuth(auth)); err != nil {
		return fmt.Errorf("push %s: %w", r, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	fmt.Printf("pushed %s@%s\n", r, d)
	return nil
}
