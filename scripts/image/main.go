// Command image writes eipd's multi-platform OCI image archive from
// prebuilt static binaries, then reads the archive back and verifies it.
// scripts/image.sh (make image) builds the binaries and calls it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eip-project/eip/internal/image"
)

// binaries collects repeated --binary os/arch=path flags.
type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok || platform == "" || path == "" {
		return fmt.Errorf("%q: want os/arch=path", v)
	}
	if _, dup := b[platform]; dup {
		return fmt.Errorf("%q: platform %s given twice", v, platform)
	}
	b[platform] = path
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	o := image.Options{Binaries: binaries{}}
	var out, name, created, digestFile string
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.Var(binaries(o.Binaries), "binary", "os/arch=path of a static eipd (repeat per platform)")
	fs.StringVar(&out, "out", "bin/eipd-image.tar", "archive to write")
	fs.StringVar(&name, "name", "ghcr.io/eip-project/eipd", "image name, without tag")
	fs.StringVar(&o.Version, "version", "", "eipd version, also the image tag")
	fs.StringVar(&o.Revision, "revision", "", "source commit")
	fs.StringVar(&o.Source, "source", "https://github.com/eip-project/eip", "source repository URL")
	fs.StringVar(&digestFile, "digest-file", "", "also write the image index's digest to this file")
	fs.StringVar(&created, "created", "", "creation time in Unix seconds (default $SOURCE_DATE_EPOCH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if created == "" {
		created = os.Getenv("SOURCE_DATE_EPOCH")
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return errors.New("flag --created: need Unix seconds (or set SOURCE_DATE_EPOCH)")
	}
	o.Created = time.Unix(secs, 0).UTC()

	idx, err := image.Build(o)
	if err != nil {
		return err
	}
	if err := image.WriteArchive(out, idx, name, o.Version); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "eipd-image-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	back, _, err := image.Open(out, dir)
	if err != nil {
		return err
	}
	entries, err := image.Verify(back, slices.Sorted(maps.Keys(o.Binaries)))
	if err != nil {
		return err
	}
	if digestFile != "" {
		d, err := back.Digest()
		if err != nil {
			return err
		}
		if err := os.WriteFile(digestFile, []byte(d.String()), 0o644); err != nil {
			return err
		}
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s) as %s:%s, verified:\n", out, mib(st.Size()), name, o.Version)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "PLATFORM\tMANIFEST\tPULL SIZE\tBINARY")
	for _, e := range entries {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.Platform, e.Digest.String()[:19], mib(e.Size), mib(e.BinarySize))
	}
	return w.Flush()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
