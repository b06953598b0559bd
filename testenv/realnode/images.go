package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/eip-project/eip/internal/image"
)

// The images the package builds: the sandbox image the nodes' containerd
// pins, and the application that tests put behind external IPs.
const (
	PauseImage = "localhost/eip-testenv/pause:1"
	WebImage   = "localhost/eip-testenv/web:1"
)

// BuildImages builds the pause and web commands of this package and writes
// each as a one-binary OCI archive in dir, with the project's own image
// builder.
func BuildImages(ctx context.Context, repoRoot, dir string) (pause, web Image, err error) {
	if pause, err = buildImage(ctx, repoRoot, dir, "pause", PauseImage, "the sandbox container of the test environment's pods"); err != nil {
		return Image{}, Image{}, err
	}
	if web, err = buildImage(ctx, repoRoot, dir, "web", WebImage, "HTTP server that says which pod answered"); err != nil {
		return Image{}, Image{}, err
	}
	return pause, web, nil
}

func buildImage(ctx context.Context, repoRoot, dir, cmd, ref, desc string) (Image, error) {
	bin := filepath.Join(dir, cmd)
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testenv/realnode/"+cmd)
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("build %s: %w: %s", cmd, err, out)
	}
	idx, err := image.Build(image.Options{
		Binaries:    map[string]string{"linux/" + runtime.GOARCH: bin},
		Version:     "1",
		Source:      "https://github.com/eip-project/eip",
		Created:     time.Unix(0, 0),
		Title:       cmd,
		Description: desc,
		Path:        "/" + cmd,
	})
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", cmd, err)
	}
	name, tag := splitRef(ref)
	archive := filepath.Join(dir, cmd+"-image.tar")
	if err := image.WriteArchive(archive, idx, name, tag); err != nil {
		return Image{}, err
	}
	return Image{Archive: archive, Ref: ref}, nil
}

// splitRef splits "host/path:tag" at the tag's colon.
func splitRef(ref string) (name, tag string) {
	i := len(ref) - 1
	for i >= 0 && ref[i] != ':' && ref[i] != '/' {
		i--
	}
	if i < 0 || ref[i] != ':' {
		return ref, "latest"
	}
	return ref[:i], ref[i+1:]
}
