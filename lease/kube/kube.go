// Package kube is a lease.Manager over Kubernetes: our subnet is this node's
// spec.podCIDR (assigned by kube-controller-manager's node IPAM), the other hosts'
// leases are the nodes carrying a podCIDR and flannel's annotations. It reads and
// writes the annotations exactly as flanneld does, so a cluster can mix both daemons.
// It holds:
//   - the Manager: Options, New, Config, Acquire, the node's public-IP annotations and
//     its NetworkUnavailable condition (kube.go), Watch (watch.go), Hold and Republish
//     (hold.go), Health (health.go), WaitSynced (synced.go) and SetNodeCondition
//     (condition.go);
//   - the annotation keys (annotations.go);
//   - the node informer's talk with the API server, its counters for Stats and its
//     readiness (contact.go), and what it keeps of a Node: only the fields weftd reads,
//     decoded from the wire (wire.go) and slimmed in the cache (slim.go).
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/lease"
)

// ErrNoNodeName is returned when neither a node name nor our pod is known.
var ErrNoNodeName = errors.New("kube subnet manager: node name missing (set NODE_NAME, or POD_NAME and POD_NAMESPACE as kube-flannel.yml does)")

// ErrBadAnnotation is wrapped by errors about a node annotation weftd cannot use.
var ErrBadAnnotation = errors.New("bad node annotation")

// Options configure the Kubernetes subnet manager.
type Options struct {
	// NodeName is our node. When it is empty the node is the spec.nodeName of our own
	// pod, PodNamespace/PodName (which kube-flannel.yml passes as POD_NAMESPACE and
	// POD_NAME), as flanneld finds it.
	NodeName     string
	PodName      string
	PodNamespace string

	Kubeconfig       string // path; with APIURL empty and this empty: in-cluster config
	APIURL           string
	NetConfPath      string // default /etc/kube-flannel/net-conf.json
	AnnotationPrefix string // default flannel.alpha.coreos.com (flanneld's rule, see keyPrefix)
	// SetNodeNetworkUnavailable clears the node's NetworkUnavailable condition in
	// MarkNetworkReady, as flanneld does.
	SetNodeNetworkUnavailable bool
	Resync                    time.Duration // informer resync (default 5 min)
	// WatchStale is how long the node watch may go without a word from the API server
	// (an event, a bookmark, a new watch) before Health reports it; default 15 min,
	// beyond the 5 to 10 min after which client-go opens each watch anew.
	WatchStale time.Duration
	// RelistSpread: a re-list of the Nodes (the API server restarted, or our watch
	// expired) first waits a random time up to it, so that a cluster's daemons spread
	// theirs; default 5 s, negative for none.
	RelistSpread time.Duration
	// SiteLabel is the node label our site is read from (Site); empty: no site.
	SiteLabel string
	// Version is the weftd version our node publishes (weft.weftnet.io/version, which
	// `weftd status` shows); empty: none.
	Version string
}

// Manager is the lease.Manager of --kube-subnet-mgr. It needs no more rights than
// kube-flannel's ClusterRole grants: get pods (to find our node), get, list and watch
// nodes, and patch nodes/status (annotations are patched through it, as flanneld does).
type Manager struct {
	opts   Options
	log    *zap.Logger
	client kubernetes.Interface
	nodes  nodeAPI // the informer's list and watch
	prefix string  // annotation keys start with it
	lists  *listStats

	nameMu   sync.Mutex
	nodeName string // resolved by nodeNameOf

	once     sync.Once
	informer cache.SharedIndexInformer
	synced   chan struct{}
	contact  *contact
	held     atomic.Pointer[lease.Lease]
	// republish wakes Hold when Republish changed held's attributes.
	republish chan struct{}

	cfgMu sync.Mutex
	cfg   *lease.Config // the network config, once Config read it

	badOverwrite atomic.Pointer[string] // last bad public-ip(v6)-overwrite logged
	stop         chan struct{}          // closed by Close: the informer stops
	done         sync.WaitGroup
}

// What weftd may ask of it beyond lease.Manager (lease/capabilities.go).
var (
	_ lease.Manager             = (*Manager)(nil)
	_ lease.SiteSource          = (*Manager)(nil)
	_ lease.StatsReporter       = (*Manager)(nil)
	_ lease.HealthReporter      = (*Manager)(nil)
	_ lease.Republisher         = (*Manager)(nil)
	_ lease.CacheSyncer         = (*Manager)(nil)
	_ lease.PublicAddressSource = (*Manager)(nil)
	_ lease.ReadyMarker         = (*Manager)(nil)
	_ lease.NodeConditionSetter = (*Manager)(nil)
)

// New returns the manager; it talks to the API server only when used.
func New(opts Options, log *zap.Logger) (*Manager, error) {
	cfg, err := ClientConfig(opts.APIURL, opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kube subnet manager: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube subnet manager: %w", err)
	}
	m, err := NewWithClient(client, opts, log)
	if err != nil {
		return nil, err
	}
	if m.nodes, err = newWireNodes(cfg, m.prefix); err != nil {
		return nil, fmt.Errorf("kube subnet manager: %w", err)
	}
	return m, nil
}

// NewWithClient returns a manager over an existing client.
func NewWithClient(client kubernetes.Interface, opts Options, log *zap.Logger) (*Manager, error) {
	if opts.NodeName == "" && (opts.PodName == "" || opts.PodNamespace == "") {
		return nil, ErrNoNodeName
	}
	if opts.NetConfPath == "" {
		opts.NetConfPath = "/etc/kube-flannel/net-conf.json"
	}
	if opts.AnnotationPrefix == "" {
		opts.AnnotationPrefix = DefaultAnnotationPrefix
	}
	prefix, err := keyPrefix(opts.AnnotationPrefix)
	if err != nil {
		return nil, fmt.Errorf("--kube-annotation-prefix: %w", err)
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
	if opts.WatchStale <= 0 {
		opts.WatchStale = 15 * time.Minute
	}
	if opts.RelistSpread == 0 {
		opts.RelistSpread = 5 * time.Second
	}
	return &Manager{opts: opts, log: log, client: client, nodes: client.CoreV1().Nodes(), prefix: prefix,
		lists:    &listStats{spread: opts.RelistSpread, rand: rand.Int64N},
		nodeName: opts.NodeName, synced: make(chan struct{}), contact: &contact{now: time.Now}, stop: make(chan struct{}),
		republish: make(chan struct{}, 1)}, nil
}

// Stats returns what the node informer counted so far.
func (m *Manager) Stats() lease.Stats { return m.lists.stats() }

// key is the annotation key of name, as flanneld writes it.
func (m *Manager) key(name string) string { return m.prefix + name }

// Config reads the network config from NetConfPath (the same JSON as etcd's).
func (m *Manager) Config(ctx context.Context) (*lease.Config, error) {
	data, err := os.ReadFile(m.opts.NetConfPath)
	if err != nil {
		return nil, fmt.Errorf("--net-config-path: %w", err)
	}
	cfg, err := lease.ParseConfig(data)
	if err != nil {
		return nil, err
	}
	m.cfgMu.Lock()
	m.cfg = cfg
	m.cfgMu.Unlock()
	return cfg, nil
}

// families returns which address families the network config enables (IPv4 alone
// before Config was called).
func (m *Manager) families() (v4, v6 bool) {
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()
	if m.cfg == nil {
		return true, false
	}
	return m.cfg.EnableIPv4, m.cfg.EnableIPv6
}

// name returns our node's name ("" before nodeNameOf found it).
func (m *Manager) name() string {
	m.nameMu.Lock()
	defer m.nameMu.Unlock()
	return m.nodeName
}

// nodeNameOf returns our node's name: Options.NodeName, else the spec.nodeName of our
// own pod. It asks the API server once; errors that retrying cannot cure (no such pod,
// no right to read it) are returned, others are retried until ctx ends.
func (m *Manager) nodeNameOf(ctx context.Context) (string, error) {
	m.nameMu.Lock()
	defer m.nameMu.Unlock()
	if m.nodeName != "" {
		return m.nodeName, nil
	}
	ns, pod := m.opts.PodNamespace, m.opts.PodName
	for {
		p, err := m.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		switch {
		case err == nil && p.Spec.NodeName != "":
			m.nodeName = p.Spec.NodeName
			m.log.Info("found our node from our pod", zap.String("pod", ns+"/"+pod), zap.String("node", m.nodeName))
			return m.nodeName, nil
		case err == nil:
			err = fmt.Errorf("pod %s/%s is not scheduled to a node", ns, pod)
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return "", fmt.Errorf("find our node from pod %s/%s (POD_NAMESPACE/POD_NAME): %w", ns, pod, err)
		}
		m.log.Warn("cannot find our node yet; retrying", zap.String("pod", ns+"/"+pod), zap.Error(err))
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// start finds our node, then runs the node informer once (until Close); later calls
// wait for its cache.
func (m *Manager) start(ctx context.Context) error {
	if _, err := m.nodeNameOf(ctx); err != nil {
		return err
	}
	m.once.Do(func() {
		lw := trackedNodes{nodes: m.nodes, c: m.contact, st: m.lists, log: m.log}
		m.informer = cache.NewSharedIndexInformer(lw, &corev1.Node{}, m.opts.Resync, cache.Indexers{})
		if err := m.informer.SetTransform(m.slim); err != nil {
			m.log.Warn("node informer keeps whole nodes", zap.Error(err))
		}
		m.done.Add(2)
		go func() {
			defer m.done.Done()
			m.informer.Run(m.stop)
		}()
		go func() {
			defer m.done.Done()
			if cache.WaitForCacheSync(m.stop, m.informer.HasSynced) {
				close(m.synced)
			}
		}()
	})
	select {
	case <-m.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the node informer and waits for it. Call it once, after every other
// call has returned.
func (m *Manager) Close() error {
	close(m.stop)
	m.done.Wait()
	return nil
}

// node returns our node from the informer's cache.
func (m *Manager) node() (*corev1.Node, bool) {
	obj, ok, err := m.informer.GetStore().GetByKey(m.name())
	if err != nil || !ok {
		return nil, false
	}
	return obj.(*corev1.Node), true
}

// NodePublicIP returns the address the node's node-public-ip annotation sets in place
// of --public-ip, as flanneld reads it at start; the zero Addr when there is none or
// the node cannot be read (that is logged).
func (m *Manager) NodePublicIP(ctx context.Context) (netip.Addr, error) {
	return m.nodeAnnotatedIP(ctx, annNodePublicIP, false)
}

// NodePublicIPv6 is NodePublicIP for node-public-ipv6, which replaces --public-ipv6.
func (m *Manager) NodePublicIPv6(ctx context.Context) (netip.Addr, error) {
	return m.nodeAnnotatedIP(ctx, annNodePublicIPv6, true)
}

func (m *Manager) nodeAnnotatedIP(ctx context.Context, ann string, v6 bool) (netip.Addr, error) {
	name, err := m.nodeNameOf(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	n, err := m.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		m.log.Warn("cannot read our node's "+m.key(ann)+" annotation", zap.String("node", name), zap.Error(err))
		return netip.Addr{}, nil
	}
	v, ok := n.Annotations[m.key(ann)]
	if !ok || v == "" {
		return netip.Addr{}, nil
	}
	ip, err := parseFamily(v, v6)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: node %s: %s=%q: %w", ErrBadAnnotation, name, m.key(ann), v, err)
	}
	m.log.Info("public IP from the node's annotation", zap.String("node", name), zap.String("annotation", m.key(ann)), zap.Stringer("public-ip", ip))
	return ip, nil
}

// parseFamily parses an IPv4 address, or an IPv6 one when v6.
func parseFamily(s string, v6 bool) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return ip, err
	case v6 && (!ip.Is6() || ip.Is4In6() || ip.Zone() != ""):
		return ip, errors.New("not an IPv6 address")
	case !v6 && !ip.Is4():
		return ip, errors.New("not an IPv4 address")
	}
	return ip, nil
}

// Acquire waits until our node has a podCIDR of each family the network config
// enables (spec.podCIDRs of a dual-stack node has one of each), then publishes our
// attributes as the node's annotations.
func (m *Manager) Acquire(ctx context.Context, attrs lease.Attrs) (lease.Lease, error) {
	if err := m.start(ctx); err != nil {
		return lease.Lease{}, err
	}
	changed := make(chan struct{}, 1)
	reg, err := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify(changed) },
		UpdateFunc: func(any, any) { notify(changed) },
	})
	if err != nil {
		return lease.Lease{}, err
	}
	defer m.informer.RemoveEventHandler(reg)
	var lastLog time.Time
	for {
		if n, ok := m.node(); ok {
			if l, err := m.ownLease(n); err == nil {
				if err := m.annotate(ctx, n, attrs); err != nil {
					return lease.Lease{}, err
				}
				l.Attrs = attrs
				m.held.Store(&l)
				return l, nil
			} else if errors.Is(err, ErrPodCIDROutsideNetwork) {
				return lease.Lease{}, err
			} else if time.Since(lastLog) > 30*time.Second {
				m.log.Info("waiting for the node's podCIDR (assigned by kube-controller-manager --allocate-node-cidrs)",
					zap.String("node", m.name()), zap.Error(err))
				lastLog = time.Now()
			}
		} else if time.Since(lastLog) > 30*time.Second {
			m.log.Info("waiting for our node object", zap.String("node", m.name()))
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return lease.Lease{}, ctx.Err()
		case <-changed:
		case <-time.After(30 * time.Second):
		}
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// errNoPodCIDR is returned for nodes without a podCIDR of a family the network needs.
var errNoPodCIDR = errors.New("no podCIDR")

// ErrPodCIDROutsideNetwork: our node's podCIDR does not lie inside the network config's
// Network (or IPv6Network). flanneld refuses to start then; so does weftd, because the
// CNI plugin rejects a subnet.env whose subnet is not inside its network and pods would
// hang in ContainerCreating. Acquire returns it at once instead of waiting.
var ErrPodCIDROutsideNetwork = errors.New("podCIDR outside the network config's Network")

// contains reports whether prefix p lies wholly inside network n.
func contains(n, p netip.Prefix) bool {
	return n.IsValid() && p.IsValid() && p.Bits() >= n.Bits() && n.Contains(p.Addr())
}

// podCIDRs returns a node's IPv4 and IPv6 podCIDRs (zero when absent): spec.podCIDRs,
// one per family on a dual-stack node, else spec.podCIDR.
func podCIDRs(n *corev1.Node) (v4, v6 netip.Prefix) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
		case p.Addr().Is4() && !v4.IsValid():
			v4 = p.Masked()
		case p.Addr().Is6() && !p.Addr().Is4In6() && !v6.IsValid():
			v6 = p.Masked()
		}
	}
	return v4, v6
}

// ownLease is our node's lease: its podCIDR of each family the network enables.
func (m *Manager) ownLease(n *corev1.Node) (lease.Lease, error) {
	want4, want6 := m.families()
	v4, v6 := podCIDRs(n)
	switch {
	case want4 && !v4.IsValid():
		return lease.Lease{}, fmt.Errorf("%w of IPv4 on node %s", errNoPodCIDR, n.Name)
	case want6 && !v6.IsValid():
		return lease.Lease{}, fmt.Errorf("%w of IPv6 on node %s (a dual-stack cluster gives each node one per family)", errNoPodCIDR, n.Name)
	}
	m.cfgMu.Lock()
	cfg := m.cfg
	m.cfgMu.Unlock()
	if cfg != nil {
		switch {
		case want4 && !contains(cfg.Network, v4):
			return lease.Lease{}, fmt.Errorf("%w: node %s has podCIDR %s, the network config's Network is %s (set Network in net-conf.json to the cluster CIDR)",
				ErrPodCIDROutsideNetwork, n.Name, v4, cfg.Network)
		case want6 && !contains(cfg.IPv6Network, v6):
			return lease.Lease{}, fmt.Errorf("%w: node %s has IPv6 podCIDR %s, the network config's IPv6Network is %s (set IPv6Network in net-conf.json to the cluster CIDR)",
				ErrPodCIDROutsideNetwork, n.Name, v6, cfg.IPv6Network)
		}
	}
	var l lease.Lease
	if want4 {
		l.Subnet = v4
	}
	if want6 {
		l.IPv6Subnet = v6
	}
	return l, nil
}

// wanted are the annotations that publish attrs on node n, as flanneld writes them:
// the IPv4 ones (backend-data, public-ip) unless a vxlan host has no IPv4 device
// (IPv6-only), the IPv6 ones (backend-v6-data, public-ipv6) when a vxlan host has a
// v6 device or another backend a PublicIPv6. A node's public-ip(v6)-overwrite
// annotation, when set, is published as its public-ip(v6).
func (m *Manager) wanted(n *corev1.Node, attrs lease.Attrs) map[string]string {
	w := map[string]string{
		m.key(annBackendType):       attrs.BackendType,
		m.key(annKubeSubnetManager): "true",
	}
	vxlan := attrs.BackendType == "vxlan"
	if !vxlan || len(attrs.BackendData) > 0 {
		w[m.key(annBackendData)] = jsonOrNull(attrs.BackendData)
		ip := attrs.PublicIP
		if !ip.IsValid() {
			ip = netip.IPv4Unspecified() // flanneld's zero IPv4 address
		}
		w[m.key(annPublicIP)] = m.overwritten(n, annPublicIPOverwrite, ip, false).String()
	}
	if vxlan && len(attrs.BackendV6Data) > 0 || !vxlan && attrs.PublicIPv6.IsValid() {
		w[m.key(annBackendV6Data)] = jsonOrNull(attrs.BackendV6Data)
		w[m.key(annPublicIPv6)] = m.overwritten(n, annPublicIPv6Overwrite, attrs.PublicIPv6, true).String()
	}
	if m.opts.Version != "" {
		w[AnnVersion] = m.opts.Version
	}
	if attrs.Site != "" {
		w[annSite], w[annSiteIP], w[annNAT] = attrs.Site, attrs.SiteIP.String(), strconv.FormatBool(attrs.NAT)
		if attrs.Outside.IsValid() {
			w[annOutside] = attrs.Outside.String()
		}
	}
	return w
}

func jsonOrNull(d json.RawMessage) string {
	if len(d) == 0 {
		return "null"
	}
	return string(d)
}

// overwritten is the address published for us: the node's overwrite annotation ann
// when it holds a valid address of the family, else ours. A bad value is logged once
// and ignored.
func (m *Manager) overwritten(n *corev1.Node, ann string, ours netip.Addr, v6 bool) netip.Addr {
	v := n.Annotations[m.key(ann)]
	if v == "" {
		return ours
	}
	ip, err := parseFamily(v, v6)
	if err != nil {
		if last := m.badOverwrite.Swap(&v); last == nil || *last != v {
			m.log.Error("ignoring the node's public IP overwrite", zap.Error(err),
				zap.String("node", n.Name), zap.String("annotation", m.key(ann)), zap.String("value", v))
		}
		return ours
	}
	return ip
}

// published reports whether n carries the annotations that publish attrs (and no
// site annotation attrs lacks).
func (m *Manager) published(n *corev1.Node, attrs lease.Attrs) bool {
	want := m.wanted(n, attrs)
	for k, v := range want {
		if got, ok := n.Annotations[k]; !ok || got != v {
			return false
		}
	}
	for _, k := range []string{annSite, annOutside} {
		if _, ok := want[k]; !ok {
			if _, had := n.Annotations[k]; had {
				return false
			}
		}
	}
	return true
}

// annotate patches the node's annotations when they differ from attrs. The patch goes
// through the nodes/status subresource, as flanneld's does: kube-flannel's ClusterRole
// grants patch on nodes/status, not on nodes.
func (m *Manager) annotate(ctx context.Context, n *corev1.Node, attrs lease.Attrs) error {
	if m.published(n, attrs) {
		return nil
	}
	want := m.wanted(n, attrs)
	anns := map[string]any{}
	for k, v := range want {
		anns[k] = v
	}
	// A site given up: its annotations go (null removes a key in a merge patch).
	for _, k := range []string{annSite, annSiteIP, annNAT, annOutside} {
		if _, ok := want[k]; !ok {
			if _, had := n.Annotations[k]; had {
				anns[k] = nil
			}
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": anns}})
	if err != nil {
		return err
	}
	_, err = m.client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("annotate node %s: %w", n.Name, err)
	}
	m.log.Info("published our attributes as node annotations", zap.String("node", n.Name),
		zap.String("public-ip", want[m.key(annPublicIP)]))
	return nil
}

// MarkNetworkReady clears the node's NetworkUnavailable condition, as flanneld does.
func (m *Manager) MarkNetworkReady(ctx context.Context) error {
	if !m.opts.SetNodeNetworkUnavailable {
		return nil
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{
		Type:               corev1.NodeNetworkUnavailable,
		Status:             corev1.ConditionFalse,
		Reason:             "FlannelIsUp",
		Message:            "weftd is running on this node",
		LastTransitionTime: now,
		LastHeartbeatTime:  now,
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = m.client.CoreV1().Nodes().PatchStatus(ctx, m.name(), patch)
	if err != nil {
		return fmt.Errorf("clear NetworkUnavailable on %s: %w", m.name(), err)
	}
	return nil
}
