package wireguard

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/weftnet/weft/transport/wgbind"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// openWGDevice opens the WireGuard device name with mtu. A device an earlier weftd
// left (Close leaves it) is taken over when impl allows its kind: the kernel's link
// keeps its peers and sessions, wireguard-go attaches to its persistent TUN. A link
// of that name of another kind is deleted first. Else it makes one: the kernel's
// when impl allows it and the kernel can (netlink LinkAdd of type wireguard), else
// wireguard-go's, with its UAPI socket in socketDir, counting its drops in drops.
func openWGDevice(name string, mtu int, impl, socketDir string, drops *wgDeviceDrops, log *zap.Logger) (wgDevice, error) {
	if old, err := netlink.LinkByName(name); err == nil {
		switch typ := old.Type(); {
		case typ == "wireguard" && impl != Userspace:
			d, err := takeKernelWG(old, mtu)
			if err == nil {
				log.Info("taking over the WireGuard device an earlier weftd left", zap.String("device", name), zap.String("implementation", Kernel))
				return d, nil
			}
			log.Warn("the WireGuard device left cannot be taken over; making it again", zap.String("device", name), zap.Error(err))
		case typ == "tuntap" && impl != Kernel:
			d, err := newUserWG(name, mtu, socketDir, drops, log)
			if err == nil {
				log.Info("taking over the WireGuard device an earlier weftd left", zap.String("device", name), zap.String("implementation", Userspace))
				return d, nil
			}
			log.Warn("the WireGuard device left cannot be taken over; making it again", zap.String("device", name), zap.Error(err))
		default:
			log.Warn("a device of another kind has the WireGuard device's name; making it again", zap.String("device", name), zap.String("type", typ))
		}
		if err := netlink.LinkDel(old); err != nil && !errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("delete the old %s: %w", name, err)
		}
	}
	if impl != Userspace {
		d, err := newKernelWG(name, mtu)
		if err == nil {
			return d, nil
		}
		if impl == Kernel {
			return nil, err
		}
		log.Info("the kernel has no WireGuard; running the device in userspace (wireguard-go)",
			zap.String("device", name), zap.Error(err))
	}
	return newUserWG(name, mtu, socketDir, drops, log)
}

// kernelWG is a device of the kernel's WireGuard, configured over generic netlink.
type kernelWG struct {
	name   string
	link   netlink.Link
	client *wgctrl.Client
	kept   bool // taken over with its peers
}

func newKernelWG(name string, mtu int) (*kernelWG, error) {
	link := &netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}, LinkType: "wireguard"}
	if err := netlink.LinkAdd(link); err != nil {
		return nil, fmt.Errorf("add a kernel wireguard link: %w", err)
	}
	client, err := wgctrl.New()
	if err != nil {
		_ = netlink.LinkDel(link)
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	return &kernelWG{name: name, link: link, client: client}, nil
}

// takeKernelWG takes over the kernel WireGuard link an earlier weftd left, with its
// peers and sessions (the backend's Configure then corrects what changed), and gives
// it mtu.
func takeKernelWG(link netlink.Link, mtu int) (*kernelWG, error) {
	client, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	if _, err := client.Device(link.Attrs().Name); err != nil {
		client.Close()
		return nil, fmt.Errorf("read the device: %w", err)
	}
	if link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			client.Close()
			return nil, fmt.Errorf("set mtu %d: %w", mtu, err)
		}
	}
	return &kernelWG{name: link.Attrs().Name, link: link, client: client, kept: true}, nil
}

func (k *kernelWG) Name() string                     { return k.name }
func (k *kernelWG) Kind() string                     { return Kernel }
func (k *kernelWG) Kept() bool                       { return k.kept }
func (k *kernelWG) Link() (netlink.Link, error)      { return netlink.LinkByName(k.name) }
func (k *kernelWG) Configure(c wgtypes.Config) error { return k.client.ConfigureDevice(k.name, c) }

func (k *kernelWG) Peers() (map[wgtypes.Key]peerStatus, error) {
	d, err := k.client.Device(k.name)
	if err != nil {
		return nil, err
	}
	out := make(map[wgtypes.Key]peerStatus, len(d.Peers))
	for _, p := range d.Peers {
		var ep netip.AddrPort
		if p.Endpoint != nil {
			ep = p.Endpoint.AddrPort()
			ep = netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
		}
		out[p.PublicKey] = peerStatus{endpoint: ep, handshake: p.LastHandshakeTime}
	}
	return out, nil
}

// Close leaves the link, its peers and their sessions, carrying traffic, for the next
// weftd.
func (k *kernelWG) Close() error { return k.client.Close() }

// Remove deletes the link.
func (k *kernelWG) Remove() error {
	err := netlink.LinkDel(k.link)
	if errors.Is(err, unix.ENODEV) {
		err = nil
	}
	return errors.Join(err, k.client.Close())
}

// userWG is a wireguard-go device in weftd: a TUN with the virtio-net header
// offloads, batched UDP sockets (GSO, GRO), and a UAPI socket so that `wg` sees it.
type userWG struct {
	name string
	dev  *device.Device
	bind *nsBind
	// relayed is the Bind's in-process leg for relayed peers (inProcessRelay).
	relayed *wgbind.Bind
	uapi    net.Listener
	path    string // the UAPI socket
	wg      sync.WaitGroup
	kick    *kicker
	dumpMu  sync.Mutex
	dump    bytes.Buffer // Peers' UAPI answer, guarded by dumpMu

	// Hand-over (handOverName): multiQueue says a new weftd's device can attach to
	// our TUN beside us; gate holds the reads of a device that took over from one
	// still running until its peers are configured (attach); linger makes Close
	// leave the device running for a new weftd; stopped closes when it has stopped.
	multiQueue bool
	gate       *gatedTUN
	linger     atomic.Bool
	stopped    chan struct{}
}

// handOverName is the local socket on which a userspace device handing over to a
// new weftd's waits for it (wgbind.Bind.HandOver, TakeOver).
func handOverName(device string) string { return "weftd-wg-handover-" + device }

// handOverAttachMax bounds how long a device that took over waits for its peers
// before it reads its TUN.
const handOverAttachMax = 30 * time.Second

func newUserWG(name string, mtu int, socketDir string, drops *wgDeviceDrops, log *zap.Logger) (*userWG, error) {
	t, multiQueue, err := createTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("create the TUN device: %w", err)
	}
	// Persistent: the TUN, its address and routes outlive this process (Close), and
	// the next weftd attaches to it.
	if err := setTUNPersist(t, true); err != nil {
		_ = t.Close()
		return nil, err
	}
	dlog := log.Named("wireguard-go").With(zap.String("device", name))
	// The device's verbose lines are counted when they tell of a drop, and formatted
	// only when debug is on: a flood of junk makes one for each datagram.
	// weft's transport carries the device's datagrams (transport/wgbind), not
	// wireguard-go's own Bind: no copy into a GSO buffer, no allocation per datagram.
	wb := wgbind.New(dlog, &drops[wgDropReplayed])
	wb.TakeRelayed(&drops[wgDropRelayedNotTaken])
	bind, err := newNSBind(wb)
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	// A weftd handing over to us still runs its device on this TUN: ours reads only
	// once its peers are configured (attach); until then the old one carries the
	// traffic, and our Bind passes it what belongs to its sessions.
	var gate *gatedTUN
	joined, err := wb.TakeOver(handOverName(name))
	switch {
	case err != nil:
		log.Warn("cannot join the WireGuard device handing over: it goes on alone until it stops", zap.String("device", name), zap.Error(err))
	case joined:
		log.Info("taking over from the WireGuard device of the weftd that ran", zap.String("device", name))
		gate = newGatedTUN(t)
		t = gate
		// Its reads wait for the first leases (attach), but not for ever.
		time.AfterFunc(handOverAttachMax, gate.open)
	}
	dev := device.NewDevice(t, bind, &device.Logger{
		Verbosef: func(format string, args ...any) {
			drops.count(format)
			if dlog.Core().Enabled(zapcore.DebugLevel) {
				dlog.Debug(fmt.Sprintf(format, args...))
			}
		},
		Errorf: func(format string, args ...any) { dlog.Warn(fmt.Sprintf(format, args...)) },
	})
	u := &userWG{name: name, dev: dev, bind: bind, relayed: wb, path: filepath.Join(socketDir, name+".sock"), kick: &kicker{dev: dev},
		multiQueue: multiQueue, gate: gate, stopped: make(chan struct{})}
	if u.uapi, err = listenUAPI(name, socketDir); err != nil {
		dev.Close()
		wb.EndHandOver()
		bind.release()
		return nil, fmt.Errorf("UAPI socket: %w", err)
	}
	u.wg.Go(func() {
		for {
			c, err := u.uapi.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	})
	return u, nil
}

// listenUAPI listens on socketDir/name.sock: through wireguard-go's ipc package in
// its own directory, else the same way in socketDir (a stale socket is replaced,
// one in use is an error; only root may connect).
func listenUAPI(name, socketDir string) (net.Listener, error) {
	if filepath.Clean(socketDir) == DefaultSocketDir {
		f, err := ipc.UAPIOpen(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return ipc.UAPIListen(name, f)
	}
	if err := os.MkdirAll(socketDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(socketDir, name+".sock")
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s is in use", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	l.SetUnlinkOnClose(true)
	return l, nil
}

// Deliver and SetRelay make the relay's legs in process (inProcessRelay).
func (u *userWG) Deliver(p []byte, from netip.AddrPort) bool { return u.relayed.Deliver(p, from) }
func (u *userWG) SetRelay(r wgbind.Relay)                    { u.relayed.SetRelay(r) }
func (u *userWG) ResendInitiation(from, to netip.AddrPort) (bool, error) {
	return u.relayed.ResendInitiation(from, to)
}
func (u *userWG) Initiations() wgbind.InitiationCounts { return u.relayed.Initiations() }

func (u *userWG) Name() string                { return u.name }
func (u *userWG) Kind() string                { return Userspace }
func (u *userWG) Kept() bool                  { return false }
func (u *userWG) Link() (netlink.Link, error) { return netlink.LinkByName(u.name) }

// Configure applies c through the device's UAPI, then brings it up (a no-op when up)
// and has the kicker start a handshake with each peer c added.
func (u *userWG) Configure(c wgtypes.Config) error {
	if c.PrivateKey != nil {
		u.kick.setOwn(c.PrivateKey.PublicKey())
	}
	var added []device.NoisePublicKey
	var keepalive map[device.NoisePublicKey]int
	peers := c.Peers
	for i, p := range c.Peers {
		key := device.NoisePublicKey(p.PublicKey)
		if p.Remove || !c.ReplacePeers && u.dev.LookupPeer(key) != nil {
			continue
		}
		added = append(added, key)
		if p.PersistentKeepaliveInterval != nil && *p.PersistentKeepaliveInterval > 0 && u.kick.waits(key) {
			// The kicker turns it on after kickDelay (see kicker.added).
			if keepalive == nil {
				keepalive = map[device.NoisePublicKey]int{}
				peers = slices.Clone(c.Peers)
			}
			keepalive[key] = int(p.PersistentKeepaliveInterval.Seconds())
			peers[i].PersistentKeepaliveInterval = nil
		}
	}
	c.Peers = peers
	if err := u.dev.IpcSet(uapiConfig(c)); err != nil {
		return err
	}
	if err := u.dev.Up(); err != nil {
		return err
	}
	u.kick.added(added, keepalive)
	return nil
}

// Peers reads the device's state through its UAPI "get", into a buffer kept from
// one call to the next (IpcGet grew a new one, and copied it, every time).
func (u *userWG) Peers() (map[wgtypes.Key]peerStatus, error) {
	u.dumpMu.Lock()
	defer u.dumpMu.Unlock()
	u.dump.Reset()
	if err := u.dev.IpcGetOperation(&u.dump); err != nil {
		return nil, err
	}
	return parseUAPIPeers(u.dump.Bytes()), nil
}

// Close stops the device and removes the UAPI socket. The TUN stays (persistent),
// with its address and routes, for the next weftd: until then the kernel drops what
// is routed to it. The sessions go with the process; the next one handshakes again.
// After handOverOnClose the device goes on, without its UAPI socket, until the new
// weftd's carries its peers' traffic.
func (u *userWG) Close() error {
	u.kick.close()
	err := u.uapi.Close()
	u.wg.Wait()
	if rerr := os.Remove(u.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	u.attach()
	if u.linger.Load() {
		done, herr := u.relayed.HandOver(handOverName(u.name))
		if herr == nil {
			go func() {
				<-done
				u.stop()
			}()
			return err
		}
		err = errors.Join(err, herr)
	}
	u.stop()
	return err
}

// stop closes the device, its Bind and its hand-over.
func (u *userWG) stop() {
	u.dev.Close()
	u.relayed.EndHandOver()
	u.bind.release()
	close(u.stopped)
}

// handOverOnClose makes Close leave the device running for a new weftd's that takes
// over beside it, where it can (its TUN is multi-queue); the channel closes when it
// has stopped.
func (u *userWG) handOverOnClose() <-chan struct{} {
	u.linger.Store(u.multiQueue)
	return u.stopped
}

// attach lets a device that took over from a running one read its TUN: its peers
// are configured.
func (u *userWG) attach() {
	if u.gate != nil {
		u.gate.open()
	}
}

// Remove stops the device and deletes its TUN.
func (u *userWG) Remove() error {
	link, lerr := netlink.LinkByName(u.name)
	err := u.Close()
	if lerr == nil {
		if derr := netlink.LinkDel(link); derr != nil && !errors.Is(derr, unix.ENODEV) {
			err = errors.Join(err, fmt.Errorf("delete %s: %w", u.name, derr))
		}
	}
	return err
}

// setTUNPersist sets or clears the persist flag of wireguard-go's TUN (TUNSETPERSIST),
// without putting its file in blocking mode (os.File.Fd would).
func setTUNPersist(t tun.Device, on bool) error {
	nt, ok := t.(*tun.NativeTun)
	if !ok {
		return fmt.Errorf("TUNSETPERSIST: %T is not a TUN", t)
	}
	rc, err := nt.File().SyscallConn()
	if err != nil {
		return fmt.Errorf("TUNSETPERSIST: %w", err)
	}
	v := 0
	if on {
		v = 1
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.IoctlSetInt(int(fd), unix.TUNSETPERSIST, v) }); err != nil {
		return fmt.Errorf("TUNSETPERSIST: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("TUNSETPERSIST: %w", serr)
	}
	return nil
}
