// Command release makes the parts of a release that need Go rather than a
// shell (scripts/release.sh runs it):
//
//	release manifest -image REF -out FILE   the install manifest eip.yaml:
//	                                        manifests/ rendered with eipd's
//	                                        image set to REF (name:tag@digest)
//	release sbom -version V -out FILE BIN   an SPDX 2.3 JSON SBOM of a Go
//	                                        binary, from its build information
//	release push [-insecure] ARCHIVE REF    push the image of `make image`'s
//	                                        archive to REF, as $REGISTRY_USER
//	                                        with $REGISTRY_PASSWORD if set
//
// Only push needs the network: the registry's.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("want a subcommand: manifest, sbom or push")
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	out := fs.String("out", "", "file to write (required)")
	switch args[0] {
	case "manifest":
		ref := fs.String("image", "", "eipd's image as name:tag@sha256:digest (required)")
		dir := fs.String("manifests", "manifests", "the kustomize base to render")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" || *ref == "" {
			return errors.New("manifest: flags -out and -image are required")
		}
		return writeManifest(*dir, *ref, *out)
	case "sbom":
		version := fs.String("version", "", "the release, the main module's version (required)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" || *version == "" || fs.NArg() != 1 {
			return errors.New("sbom: want -out FILE, -version V and one binary")
		}
		created, err := sourceDate()
		if err != nil {
			return err
		}
		return writeSBOM(fs.Arg(0), *version, *out, created)
	case "push":
		insecure := fs.Bool("insecure", false, "plain HTTP, for a registry on loopback")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return errors.New("push: want ARCHIVE and REF")
		}
		return pushImage(fs.Arg(0), fs.Arg(1), *insecure)
	}
	return fmt.Errorf("unknown subcommand %q: want manifest, sbom or push", args[0])
}

// sourceDate is $SOURCE_DATE_EPOCH, so that the same commit gives the same
// bytes.
func sourceDate() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	var secs int64
	if _, err := fmt.Sscan(v, &secs); err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want Unix seconds", v)
	}
	return time.Unix(secs, 0).UTC(), nil
}
