// Package kube is a lease.Manager over Kubernetes: our subnet is this node's
// spec.podCIDR (assigned by kube-controller-manager's node IPAM), the other hosts'
// leases are the nodes carrying a podCIDR and flannel's annotations. It reads and
// writes the annotations exactly as flanneld does, so a cluster can mix both daemons.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

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
}

// Manager is the lease.Manager of --kube-subnet-mgr. It needs no more rights than
// kube-flannel's ClusterRole grants: get pods (to find our node), get, list and watch
// nodes, and patch nodes/status (annotations are patched through it, as flanneld does).
type Manager struct {
	opts   Options
	log    *zap.Logger
	client kubernetes.Interface
	prefix string // annotation keys start with it

	nameMu   sync.Mutex
	nodeName string // resolved by nodeNameOf

	once     sync.Once
	informer cache.SharedIndexInformer
	synced   chan struct{}
	contact  *contact
	held     atomic.Pointer[lease.Lease]

	badOverwrite atomic.Pointer[string] // last bad public-ip-overwrite logged
	stop         chan struct{}          // closed by Close: the informer stops
	done         sync.WaitGroup
}

var _ lease.Manager = (*Manager)(nil)

// New returns the manager; it talks to the API server only when used.
func New(opts Options, log *zap.Logger) (*Manager, error) {
	var cfg *rest.Config
	var err error
	if opts.APIURL == "" && opts.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags(opts.APIURL, opts.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kube subnet manager: client config: %w", err)
	}
	cfg.UserAgent = "weftd"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube subnet manager: %w", err)
	}
	return NewWithClient(client, opts, log)
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
	return &Manager{opts: opts, log: log, client: client, prefix: prefix, nodeName: opts.NodeName,
		synced: make(chan struct{}), contact: &contact{now: time.Now}, stop: make(chan struct{})}, nil
}

// key is the annotation key of name, as flanneld writes it.
func (m *Manager) key(name string) string { return m.prefix + name }

// Config reads the network config from NetConfPath (the same JSON as etcd's).
func (m *Manager) Config(ctx context.Context) (*lease.Config, error) {
	data, err := os.ReadFile(m.opts.NetConfPath)
	if err != nil {
		return nil, fmt.Errorf("--net-config-path: %w", err)
	}
	return lease.ParseConfig(data)
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
		lw := trackedNodes{nodes: m.client.CoreV1().Nodes(), c: m.contact}
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
	name, err := m.nodeNameOf(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	n, err := m.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		m.log.Warn("cannot read our node's "+m.key(annNodePublicIP)+" annotation", zap.String("node", name), zap.Error(err))
		return netip.Addr{}, nil
	}
	v, ok := n.Annotations[m.key(annNodePublicIP)]
	if !ok || v == "" {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(v)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, fmt.Errorf("%w: node %s: %s=%q is not an IPv4 address", ErrBadAnnotation, name, m.key(annNodePublicIP), v)
	}
	m.log.Info("public IP from the node's annotation", zap.String("node", name), zap.String("annotation", m.key(annNodePublicIP)), zap.Stringer("public-ip", ip))
	return ip, nil
}

// Acquire waits until our node has a podCIDR, then publishes our attributes as the
// node's annotations.
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
			if subnet, err := podCIDR(n); err == nil {
				if err := m.annotate(ctx, n, attrs); err != nil {
					return lease.Lease{}, err
				}
				l := lease.Lease{Subnet: subnet, Attrs: attrs}
				m.held.Store(&l)
				return l, nil
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

// errNoPodCIDR is returned for nodes without a (valid IPv4) podCIDR.
var errNoPodCIDR = errors.New("no podCIDR")

func podCIDR(n *corev1.Node) (netip.Prefix, error) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
			return p.Masked(), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w on node %s", errNoPodCIDR, n.Name)
}

// wanted are the annotations that publish attrs on node n, as flanneld writes them:
// the node's public-ip-overwrite annotation, when set, is published as its public-ip.
func (m *Manager) wanted(n *corev1.Node, attrs lease.Attrs) map[string]string {
	data := string(attrs.BackendData)
	if data == "" {
		data = "null"
	}
	return map[string]string{
		m.key(annBackendData):       data,
		m.key(annBackendType):       attrs.BackendType,
		m.key(annKubeSubnetManager): "true",
		m.key(annPublicIP):          m.publicIP(n, attrs).String(),
	}
}

// publicIP is the address published for us: the node's public-ip-overwrite when it is
// a valid IPv4 address, else ours. A bad value is logged once and ignored.
func (m *Manager) publicIP(n *corev1.Node, attrs lease.Attrs) netip.Addr {
	v := n.Annotations[m.key(annPublicIPOverwrite)]
	if v == "" {
		return attrs.PublicIP
	}
	ip, err := netip.ParseAddr(v)
	if err != nil || !ip.Is4() {
		if last := m.badOverwrite.Swap(&v); last == nil || *last != v {
			m.log.Error("ignoring the node's public IP overwrite: not an IPv4 address",
				zap.String("node", n.Name), zap.String("annotation", m.key(annPublicIPOverwrite)), zap.String("value", v))
		}
		return attrs.PublicIP
	}
	return ip
}

// published reports whether n carries the annotations that publish attrs.
func (m *Manager) published(n *corev1.Node, attrs lease.Attrs) bool {
	for k, v := range m.wanted(n, attrs) {
		if got, ok := n.Annotations[k]; !ok || got != v {
			return false
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
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": want}})
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
