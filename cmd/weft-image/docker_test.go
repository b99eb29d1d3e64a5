package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/weftnet/weft/bench/testenv"
)

// Debian's docker.io (make deps), by absolute path: /usr/local/bin/docker may be
// another CLI first on PATH.
const (
	dockerdPath = "/usr/sbin/dockerd"
	dockerPath  = "/usr/bin/docker"
)

// dockerDaemon is a private dockerd: its config, data root, exec root, pid file and
// socket under one temporary directory, with the containerd it starts itself (whose
// socket and state are under the exec root, its content under the data root), never
// the machine's /var/lib/docker, /run/docker or /run/containerd.
type dockerDaemon struct {
	dir, host string
	env       []string
}

// startDockerd starts a private dockerd without networking of its own (no bridge, no
// iptables rules) and stops it, unmounts what it left and removes its directories when
// the test ends, or when the test binary is interrupted.
func startDockerd(t *testing.T) *dockerDaemon {
	t.Helper()
	// A short path: the sockets under it (exec/containerd/containerd.sock.ttrpc) must
	// fit in sun_path.
	dir, err := os.MkdirTemp("/tmp", "wd")
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerDaemon{dir: dir, host: "unix://" + filepath.Join(dir, "d.sock"),
		// The CLI's own config (contexts, credentials) is the test's, not root's.
		env: append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "cli"), "DOCKER_HOST=")}
	// dockerd 20.10 writes its trust key to /etc/docker/key.json whatever its roots are;
	// the test removes the key it made.
	const trustKey = "/etc/docker/key.json"
	_, err = os.Stat(trustKey)
	keyExisted := err == nil
	removeDir := func() error {
		err := unmountUnder(dir)
		if !keyExisted {
			if rerr := os.Remove(trustKey); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
		return errors.Join(err, os.RemoveAll(dir))
	}
	testenv.OnInterrupt(t, "dockerd directory "+dir, removeDir)
	t.Cleanup(func() {
		if err := removeDir(); err != nil {
			t.Error(err)
		}
	})

	cfg := filepath.Join(dir, "daemon.json") // not the machine's /etc/docker/daemon.json
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(dockerdPath,
		"--config-file", cfg,
		"--data-root", filepath.Join(dir, "root"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"-H", d.host,
		"--iptables=false", "--ip6tables=false", "--ip-masq=false", "--bridge=none",
		"--storage-driver=vfs")
	cmd.Env = d.env
	// On SIGTERM dockerd stops the containerd it started and unmounts its layers; that
	// containerd dies with dockerd too (Pdeathsig).
	p := startDaemonProc(t, "dockerd", cmd, filepath.Join(dir, "dockerd.log"))
	start := time.Now()
	p.await(t, 60*time.Second, func() error {
		out, err := d.docker(context.Background(), "version", "--format", "{{.Server.Version}}")
		if err == nil {
			t.Logf("dockerd %s answered in %v", strings.TrimSpace(out), time.Since(start).Round(time.Millisecond))
		}
		return err
	})
	return d
}

// docker runs Debian's docker CLI against the private dockerd.
func (d *dockerDaemon) docker(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, dockerPath, append([]string{"-H", d.host}, args...)...)
	cmd.Env = d.env
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// TestDockerLoad loads make image's archive into a private Docker daemon (Debian's
// docker.io, 20.10) as deploy/README.md tells cri-dockerd users to: docker load reads
// the archive's manifest.json, so it gets one image, the host's, under the tag
// index.json names, with the same config (image ID) as in the index; that image runs.
func TestDockerLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs dockerd: not in -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedTools(t, dockerdPath, dockerPath, "containerd", "containerd-shim-runc-v2", "runc")
	bin := os.Getenv("WEFT_BIN")
	built := filepath.Join(bin, "weftd-image.tar")
	st, err := os.Stat(built)
	testenv.Need(t, bin != "" && err == nil, "WEFT_BIN/weftd-image.tar (make image)")

	ref, _, err := archiveIndex(built)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := startDockerd(t)
	start := time.Now()
	out, err := d.docker(ctx, "load", "-i", built)
	if err != nil {
		t.Fatal(err)
	}
	loadTime := time.Since(start)
	if !strings.Contains(out, "Loaded image: "+ref+"\n") {
		t.Fatalf("docker load printed %q, want it to name %s", out, ref)
	}

	// One image, under that one tag, whose ID is the config digest of the manifest.json
	// image, which is the index's image for the host: the other platforms' are not loaded.
	img, err := tarball.ImageFromPath(built, nil)
	if err != nil {
		t.Fatalf("%s as a docker archive: %v", built, err)
	}
	configName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if hostConfig := indexConfig(t, built, runtime.GOARCH); hostConfig != configName {
		t.Fatalf("manifest.json's image has config %v, the index's %s image %v", configName, runtime.GOARCH, hostConfig)
	}
	list, err := d.docker(ctx, "image", "ls", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
	if err != nil {
		t.Fatal(err)
	}
	if want := ref + " " + configName.String(); strings.TrimSpace(list) != want {
		t.Errorf("docker image ls:\n%s\nwant the one line %q", list, want)
	}
	out, err = d.docker(ctx, "image", "inspect", "--format",
		"{{.Os}} {{.Architecture}} {{.Size}} {{json .Config.Entrypoint}}", ref)
	if err != nil {
		t.Fatal(err)
	}
	var osName, arch, entrypoint string
	var size int64
	if _, err := fmt.Sscan(out, &osName, &arch, &size, &entrypoint); err != nil {
		t.Fatalf("docker image inspect: %q: %v", out, err)
	}
	if osName != "linux" || arch != runtime.GOARCH {
		t.Errorf("docker image inspect: %s/%s, want linux/%s", osName, arch, runtime.GOARCH)
	}
	if want := `["/` + weftdPath + `"]`; entrypoint != want {
		t.Errorf("entrypoint %s, want %s", entrypoint, want)
	}
	t.Logf("docker load of %s (%d bytes): %v; %s %s/%s, %d bytes unpacked",
		built, st.Size(), loadTime.Round(time.Millisecond), ref, osName, arch, size)

	// The entrypoint, weftd, runs: docker run as cri-dockerd would start it.
	start = time.Now()
	out, err = d.docker(ctx, "run", "--rm", "--network", "none", ref, "--version")
	if err != nil {
		t.Fatal(err)
	}
	version := ref[strings.LastIndexByte(ref, ':')+1:]
	if !strings.HasPrefix(out, "weftd ") || !strings.Contains(out, version) {
		t.Errorf("docker run %s --version printed %q, want weftd %s", ref, out, version)
	}
	t.Logf("docker run: %q in %v", strings.TrimSpace(out), time.Since(start).Round(time.Millisecond))
}

// indexConfig returns the config digest of arch's image in the archive's index.
func indexConfig(t *testing.T, archive, arch string) v1.Hash {
	t.Helper()
	p, err := findPlatform(arch)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	digest, err := writeLayout(archive, dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := layout.Path(dir).ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := top.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range im.Manifests {
		if desc.Platform == nil || desc.Platform.String() != p.String() {
			continue
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		config, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		return config
	}
	t.Fatalf("%s: no %s image in the index", archive, p)
	return v1.Hash{}
}
