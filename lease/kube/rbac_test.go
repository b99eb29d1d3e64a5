package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// TestKubeFlannelRights: the identity the tests give weftd really is limited to
// kube-flannel's ClusterRole (so the other tests prove weftd needs no more): it may
// patch nodes/status but not nodes, and cannot list pods; a pod that is not there is a
// clear error, not a hang.
func TestKubeFlannelRights(t *testing.T) {
	srv, admin := apiServer(t)
	id := flannel(t, srv, admin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createNode(t, admin, "n1", "198.18.1.0/24", nil)
	cs := clientFor(t, id.Kubeconfig)
	patch := []byte(`{"metadata":{"annotations":{"example.com/x":"y"}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("patch nodes as %s: %v, want forbidden", kubetest.User, err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patch nodes/status as %s: %v", kubetest.User, err)
	}
	if _, err := cs.CoreV1().Pods(kubetest.Namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list pods as %s: %v, want forbidden", kubetest.User, err)
	}

	m := newManager(t, id, Options{PodName: "no-such-pod", PodNamespace: kubetest.Namespace})
	_, err := m.Acquire(ctx, attrs("192.0.2.10"))
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "POD_NAME") {
		t.Fatalf("acquire from a missing pod: %v", err)
	}
}

// TestKubeAnnotations: --kube-annotation-prefix=example.com/flannel gives keys like
// example.com/flannel-public-ip, as flanneld's; the node's public-ip-overwrite is
// published as its public-ip (and followed when it changes); node-public-ip replaces
// our public IP, and a bad one is a clear error.
func TestKubeAnnotations(t *testing.T) {
	srv, admin := apiServer(t)
	id := flannel(t, srv, admin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const p = "example.com/flannel-"
	createNode(t, admin, "n1", "198.18.1.0/24", map[string]string{
		p + "public-ip-overwrite": "198.51.100.99",
		p + "node-public-ip":      "192.0.2.77",
	})
	createNode(t, admin, "n2", "198.18.2.0/24", map[string]string{p + "node-public-ip": "not-an-ip"})

	m := newManager(t, id, Options{NodeName: "n1", AnnotationPrefix: "example.com/flannel"})
	ip, err := m.NodePublicIP(ctx)
	if err != nil || ip.String() != "192.0.2.77" {
		t.Fatalf("node public IP %v, %v; want 192.0.2.77", ip, err)
	}
	l, err := m.Acquire(ctx, attrs("192.0.2.10"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{p + "public-ip": "198.51.100.99", p + "backend-type": "vxlan", p + "kube-subnet-manager": "true",
		p + "backend-data": `{"VtepMAC":"02:00:00:00:00:01"}`} {
		if n.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q (all: %v)", k, n.Annotations[k], v, n.Annotations)
		}
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, "example.com/flannel/") || strings.HasPrefix(k, "flannel.alpha.coreos.com/") {
			t.Errorf("annotation %s under the wrong prefix", k)
		}
	}

	// The overwrite changes while we hold the lease: the published address follows.
	go m.Hold(ctx, l, func(lease.Lease) {})
	change := []byte(`{"metadata":{"annotations":{"` + p + `public-ip-overwrite":"198.51.100.98"}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, change, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := n.Annotations[p+"public-ip"]; got != "198.51.100.98" {
			return errors.New("public-ip is " + got)
		}
		return nil
	})

	m2 := newManager(t, id, Options{NodeName: "n2", AnnotationPrefix: "example.com/flannel"})
	if _, err := m2.NodePublicIP(ctx); !errors.Is(err, ErrBadAnnotation) {
		t.Fatalf("bad node-public-ip: %v, want ErrBadAnnotation", err)
	}
}

// TestKubeHealth: Health is nil while the lease is held and the node watch current,
// and names the failing watch once the API server is gone.
func TestKubeHealth(t *testing.T) {
	srv, admin := apiServer(t)
	id := flannel(t, srv, admin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNode(t, admin, "n1", "198.18.1.0/24", nil)
	m := newManager(t, id, Options{NodeName: "n1"})
	if err := m.Health(time.Now()); !errors.Is(err, errNotSynced) {
		t.Fatalf("health before start: %v", err)
	}
	if _, err := m.Acquire(ctx, attrs("192.0.2.10")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error { return m.Health(time.Now()) })
	if err := m.Health(time.Now().Add(time.Hour)); !errors.Is(err, errWatchStale) {
		t.Fatalf("health an hour on without a word: %v", err)
	}
	srv.Close()
	waitFor(t, 30*time.Second, func() error {
		if err := m.Health(time.Now()); !errors.Is(err, errWatchFailing) {
			return errors.New("health without an API server: " + errString(err))
		}
		return nil
	})
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// waitFor retries f until it returns nil or d passes (testenv.Eventually).
func waitFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	testenv.Eventually(t, d, f)
}
