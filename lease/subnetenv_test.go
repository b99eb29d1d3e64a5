package lease

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// onlyFiles fails t unless dir holds exactly names (no temp files left behind).
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != len(names) {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
	for i := range names {
		if got[i] != names[i] {
			t.Fatalf("%s holds %v, want %v", dir, got, names)
		}
	}
}

func TestSubnetEnvRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  SubnetEnv
		text string
	}{
		{"udp", SubnetEnv{Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.5.0/24"), MTU: 1472, IPMasq: true},
			"FLANNEL_NETWORK=198.18.0.0/16\nFLANNEL_SUBNET=198.18.5.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"},
		{"small subnets", SubnetEnv{Network: pfx("198.18.0.0/26"), Subnet: pfx("198.18.0.48/28"), MTU: 1450},
			"FLANNEL_NETWORK=198.18.0.0/26\nFLANNEL_SUBNET=198.18.0.49/28\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"},
		// flanneld's order: the IPv4 pair, the IPv6 pair, then MTU and IPMASQ.
		{"dual stack", SubnetEnv{Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.5.0/24"),
			IPv6Network: pfx("fd00:db8::/48"), IPv6Subnet: pfx("fd00:db8:0:5::/64"), MTU: 1450, IPMasq: true},
			"FLANNEL_NETWORK=198.18.0.0/16\nFLANNEL_SUBNET=198.18.5.1/24\nFLANNEL_IPV6_NETWORK=fd00:db8::/48\nFLANNEL_IPV6_SUBNET=fd00:db8:0:5::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"},
		{"IPv6 only", SubnetEnv{IPv6Network: pfx("fd00:db8::/48"), IPv6Subnet: pfx("fd00:db8:0:5::/64"), MTU: 1450},
			"FLANNEL_IPV6_NETWORK=fd00:db8::/48\nFLANNEL_IPV6_SUBNET=fd00:db8:0:5::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run", "flannel") // made by WriteSubnetEnv
			path := filepath.Join(dir, "subnet.env")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			// An older file is replaced, not appended to.
			if err := os.WriteFile(path, []byte("FLANNEL_SUBNET=10.9.9.1/24\nOLD=1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := WriteSubnetEnv(path, tc.env); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.text {
				t.Errorf("file:\n%s\nwant:\n%s", data, tc.text)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("mode %v, want 0644", fi.Mode().Perm())
			}
			onlyFiles(t, dir, "subnet.env")
			got, err := ReadSubnetEnv(path)
			if err != nil || got != tc.env {
				t.Errorf("ReadSubnetEnv = %+v, %v; want %+v", got, err, tc.env)
			}
		})
	}
}

func TestWriteSubnetEnvMakesDirAndFailsCleanly(t *testing.T) {
	root := t.TempDir()
	env := SubnetEnv{Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.5.0/24"), MTU: 1472}
	if err := WriteSubnetEnv(filepath.Join(root, "a", "b", "subnet.env"), env); err != nil {
		t.Fatalf("into a missing directory: %v", err)
	}
	onlyFiles(t, filepath.Join(root, "a", "b"), "subnet.env")
	// A directory in the way: the rename fails and no temp file is left.
	blocked := filepath.Join(root, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "subnet.env", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteSubnetEnv(filepath.Join(blocked, "subnet.env"), env); err == nil {
		t.Fatal("writing over a non-empty directory succeeded")
	}
	onlyFiles(t, blocked, "subnet.env")
}

// TestWriteSubnetEnvAtomic has a reader see only whole files while a writer keeps
// replacing the file with one of two contents.
func TestWriteSubnetEnvAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "subnet.env")
	envs := []SubnetEnv{
		{Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.5.0/24"), MTU: 1472, IPMasq: true},
		{Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.200.0/24"), MTU: 1450},
	}
	if err := WriteSubnetEnv(path, envs[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 0; i < 300; i++ {
			if err := WriteSubnetEnv(path, envs[i%2]); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for stop := false; !stop; reads++ {
		select {
		case <-done:
			stop = true
		default:
		}
		got, err := ReadSubnetEnv(path)
		if err != nil || got != envs[0] && got != envs[1] {
			t.Fatalf("read %d saw %+v, %v", reads, got, err)
		}
	}
	wg.Wait()
	onlyFiles(t, filepath.Dir(path), "subnet.env")
}

func TestReadSubnetEnv(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       *SubnetEnv // nil: ErrBadSubnetEnv
	}{
		{"flanneld's file", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
			&SubnetEnv{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.3.0/24"), MTU: 1450, IPMasq: true}},
		{"extra keys, blank lines, no final newline", "\n# comment\nFLANNEL_OTHER=fd00::/56\n  FLANNEL_SUBNET=10.244.3.1/24  \nFLANNEL_MTU=1450",
			&SubnetEnv{Subnet: pfx("10.244.3.0/24"), MTU: 1450}},
		{"flanneld's dual-stack file", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_NETWORK=fd00:0:0:1::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:103::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
			&SubnetEnv{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.3.0/24"), IPv6Network: pfx("fd00:0:0:1::/56"),
				IPv6Subnet: pfx("fd00:0:0:103::/64"), MTU: 1450, IPMasq: true}},
		{"flanneld's IPv6-only file", "FLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:3::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
			&SubnetEnv{IPv6Network: pfx("fd00::/56"), IPv6Subnet: pfx("fd00:0:0:3::/64"), MTU: 1450}},
		{"bad IPv6 subnet", "FLANNEL_IPV6_SUBNET=fd00::1\n", nil},
		{"bad IPv6 network", "FLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_NETWORK=x\n", nil},
		{"empty", "", nil},
		{"no subnet", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_MTU=1450\n", nil},
		{"bad subnet", "FLANNEL_SUBNET=10.244.3.1\n", nil},
		{"empty subnet", "FLANNEL_SUBNET=\n", nil},
		{"bad network", "FLANNEL_NETWORK=ten\nFLANNEL_SUBNET=10.244.3.1/24\n", nil},
		{"bad MTU", "FLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=big\n", nil},
		{"bad IPMASQ", "FLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPMASQ=maybe\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "subnet.env")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadSubnetEnv(path)
			if tc.want == nil {
				if !errors.Is(err, ErrBadSubnetEnv) {
					t.Errorf("ReadSubnetEnv = %+v, %v; want ErrBadSubnetEnv", got, err)
				}
				return
			}
			if err != nil || got != *tc.want {
				t.Errorf("ReadSubnetEnv = %+v, %v; want %+v", got, err, *tc.want)
			}
		})
	}
	if _, err := ReadSubnetEnv(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}
