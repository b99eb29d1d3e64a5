package lease

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrBadSubnetEnv is wrapped by errors about a subnet.env that cannot be read.
var ErrBadSubnetEnv = errors.New("bad subnet.env")

// SubnetEnv is what subnet.env tells the CNI plugin.
// The IPv4 fields are zero on an IPv6-only network, the IPv6 ones without IPv6.
type SubnetEnv struct {
	Network     netip.Prefix
	Subnet      netip.Prefix
	IPv6Network netip.Prefix
	IPv6Subnet  netip.Prefix
	MTU         int
	IPMasq      bool
}

// WriteSubnetEnv writes env to path atomically (temp file, fsync, rename), in
// flannel's format and order. FLANNEL_SUBNET is the subnet's second address with its
// length (10.5.7.1/24 for 10.5.7.0/24), as is FLANNEL_IPV6_SUBNET; the IPv4 lines are
// left out without an IPv4 subnet, the IPv6 lines without an IPv6 one.
func WriteSubnetEnv(path string, env SubnetEnv) error {
	var b bytes.Buffer
	if env.Subnet.IsValid() {
		fmt.Fprintf(&b, "FLANNEL_NETWORK=%s\n", env.Network)
		fmt.Fprintf(&b, "FLANNEL_SUBNET=%s/%d\n", env.Subnet.Masked().Addr().Next(), env.Subnet.Bits())
	}
	if env.IPv6Subnet.IsValid() {
		fmt.Fprintf(&b, "FLANNEL_IPV6_NETWORK=%s\n", env.IPv6Network)
		fmt.Fprintf(&b, "FLANNEL_IPV6_SUBNET=%s/%d\n", env.IPv6Subnet.Masked().Addr().Next(), env.IPv6Subnet.Bits())
	}
	fmt.Fprintf(&b, "FLANNEL_MTU=%d\n", env.MTU)
	fmt.Fprintf(&b, "FLANNEL_IPMASQ=%t\n", env.IPMasq)
	if err := writeAtomic(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write subnet file: %w", err)
	}
	return nil
}

// ReadSubnetEnv reads a subnet.env written by weftd or flanneld.
func ReadSubnetEnv(path string) (SubnetEnv, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return SubnetEnv{}, err
	}
	var env SubnetEnv
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch k {
		case "FLANNEL_NETWORK":
			env.Network, err = netip.ParsePrefix(v)
		case "FLANNEL_SUBNET":
			var p netip.Prefix
			p, err = netip.ParsePrefix(v)
			env.Subnet = p.Masked()
		case "FLANNEL_IPV6_NETWORK":
			env.IPv6Network, err = netip.ParsePrefix(v)
		case "FLANNEL_IPV6_SUBNET":
			var p netip.Prefix
			p, err = netip.ParsePrefix(v)
			env.IPv6Subnet = p.Masked()
		case "FLANNEL_MTU":
			env.MTU, err = strconv.Atoi(v)
		case "FLANNEL_IPMASQ":
			env.IPMasq, err = strconv.ParseBool(v)
		}
		if err != nil {
			return SubnetEnv{}, fmt.Errorf("%w: %s: %s: %w", ErrBadSubnetEnv, path, k, err)
		}
	}
	if !env.Subnet.IsValid() && !env.IPv6Subnet.IsValid() {
		return SubnetEnv{}, fmt.Errorf("%w: %s: neither FLANNEL_SUBNET nor FLANNEL_IPV6_SUBNET", ErrBadSubnetEnv, path)
	}
	return env, nil
}

// writeAtomic replaces path with data so that readers see the old or the new file,
// never a part of one.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
