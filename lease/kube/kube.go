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
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/lease"
)

// ErrNoNodeName is returned when Options.NodeName is empty.
var ErrNoNodeName = errors.New("kube subnet manager: node name missing (set NODE_NAME)")

// Options configure the Kubernetes subnet manager.
type Options struct {
	NodeName         string
	Kubeconfig       string // path; with APIURL empty and this empty: in-cluster config
	APIURL           string
	NetConfPath      string // default /etc/kube-flannel/net-conf.json
	AnnotationPrefix string // default flannel.alpha.coreos.com
	// SetNodeNetworkUnavailable clears the node's NetworkUnavailable condition in
	// MarkNetworkReady, as flanneld does.
	SetNodeNetworkUnavailable bool
	Resync                    time.Duration // informer resync (default 5 min)
}

// Manager is the lease.Manager of --kube-subnet-mgr.
type Manager struct {
	opts   Options
	log    *zap.Logger
	client kubernetes.Interface

	once     sync.Once
	informer cache.SharedIndexInformer
	synced   chan struct{}
	stop     chan struct{} // closed by Close: the informer stops
	done     sync.WaitGroup
}

var _ lease.Manager = (*Manager)(nil)

// New returns the manager; it talks to the API server only when used.
func New(opts Options, log *zap.Logger) (*Manager, error) {
	if opts.NodeName == "" {
		return nil, ErrNoNodeName
	}
	if opts.NetConfPath == "" {
		opts.NetConfPath = "/etc/kube-flannel/net-conf.json"
	}
	if opts.AnnotationPrefix == "" {
		opts.AnnotationPrefix = "flannel.alpha.coreos.com"
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
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
	return NewWithClient(client, opts, log), nil
}

// NewWithClient returns a manager over an existing client.
func NewWithClient(client kubernetes.Interface, opts Options, log *zap.Logger) *Manager {
	if opts.AnnotationPrefix == "" {
		opts.AnnotationPrefix = "flannel.alpha.coreos.com"
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
	return &Manager{opts: opts, log: log, client: client, synced: make(chan struct{}), stop: make(chan struct{})}
}

// annotation keys, as flanneld writes them.
func (m *Manager) key(name string) string { return m.opts.AnnotationPrefix + "/" + name }

// Config reads the network config from NetConfPath (the same JSON as etcd's).
func (m *Manager) Config(ctx context.Context) (*lease.Config, error) {
	data, err := os.ReadFile(m.opts.NetConfPath)
	if err != nil {
		return nil, fmt.Errorf("--net-config-path: %w", err)
	}
	return lease.ParseConfig(data)
}

// start runs the node informer once (until Close); later calls wait for its cache.
func (m *Manager) start(ctx context.Context) error {
	m.once.Do(func() {
		m.informer = informers.NewSharedInformerFactory(m.client, m.opts.Resync).Core().V1().Nodes().Informer()
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
	obj, ok, err := m.informer.GetStore().GetByKey(m.opts.NodeName)
	if err != nil || !ok {
		return nil, false
	}
	return obj.(*corev1.Node), true
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
				return lease.Lease{Subnet: subnet, Attrs: attrs}, nil
			} else if time.Since(lastLog) > 30*time.Second {
				m.log.Info("waiting for the node's podCIDR (assigned by kube-controller-manager --allocate-node-cidrs)",
					zap.String("node", m.opts.NodeName), zap.Error(err))
				lastLog = time.Now()
			}
		} else if time.Since(lastLog) > 30*time.Second {
			m.log.Info("waiting for our node object", zap.String("node", m.opts.NodeName))
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

// wanted are the annotations that publish attrs, as flanneld writes them.
func (m *Manager) wanted(attrs lease.Attrs) map[string]string {
	data := string(attrs.BackendData)
	if data == "" {
		data = "null"
	}
	return map[string]string{
		m.key("backend-data"):        data,
		m.key("backend-type"):        attrs.BackendType,
		m.key("kube-subnet-manager"): "true",
		m.key("public-ip"):           attrs.PublicIP.String(),
	}
}

// annotate patches the node's annotations when they differ from attrs.
func (m *Manager) annotate(ctx context.Context, n *corev1.Node, attrs lease.Attrs) error {
	want := m.wanted(attrs)
	same := true
	for k, v := range want {
		if n.Annotations[k] != v {
			same = false
		}
	}
	if same {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": want}})
	if err != nil {
		return err
	}
	_, err = m.client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("annotate node %s: %w", n.Name, err)
	}
	m.log.Info("published our attributes as node annotations", zap.String("node", n.Name))
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
	_, err = m.client.CoreV1().Nodes().PatchStatus(ctx, m.opts.NodeName, patch)
	if err != nil {
		return fmt.Errorf("clear NetworkUnavailable on %s: %w", m.opts.NodeName, err)
	}
	return nil
}
