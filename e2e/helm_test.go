package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/bench/kubecluster"
)

// helmValues is a values file in the style of flannel's chart: the cluster's pod
// network and the host-gw backend (both nodes share LAN1).
const helmValues = `
podCidr: %q
flannel:
  backend: host-gw
  args:
  - "--ip-masq"
  - "--kube-subnet-mgr"
`

// TestHelm installs deploy/chart/weft with helm's install action on a real two-node
// Kubernetes (bench/kubecluster) as the cluster's admin, with a flannel-style values
// file; weftd runs under the chart's RBAC (kube-flannel's ClusterRole). It checks the
// nodes Ready, the DaemonSet's pods Ready as the flannel ServiceAccount, the host-gw
// backend in use, pods on the two nodes pinging each other and moving TCP data, and
// that helm uninstall removes every object the release made.
func TestHelm(t *testing.T) {
	image := daemonSetPrereqs(t)
	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image}})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	cfg, rel := helmInstall(t, ctx, c, fmt.Sprintf(helmValues, kubecluster.ClusterCIDR))
	t.Logf("installed %v after start", time.Since(start).Round(time.Millisecond))

	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	for _, n := range c.Nodes {
		node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Annotations["flannel.alpha.coreos.com/backend-type"]; got != "host-gw" {
			t.Errorf("node %s backend-type %q, want host-gw from the values file", n.Name, got)
		}
	}
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	tcpPods(t, a, b, 8<<20)
	tcpPods(t, b, a, 8<<20)
	t.Logf("host-gw: pods %s and %s ping each other and move TCP data; %v after start",
		a.ip, b.ip, time.Since(start).Round(time.Millisecond))

	t.Run("upgrade and rollback", func(t *testing.T) {
		upgradeRollback(t, ctx, c, cfg, rel.Name, a, b)
		pingPod(t, ctx, c.Admin, a, b)
		tcpPods(t, a, b, 1<<20)
	})

	uninstall(t, ctx, c, cfg, rel.Name)
	t.Logf("helm uninstall: every object gone %v after start", time.Since(start).Round(time.Millisecond))
}

// upgradeRollback moves the release to a new image tag with helm upgrade (the same
// image under a second tag, values reused), then back with helm rollback to revision 1,
// each while a pings b every 10 ms, and checks that host-gw lost no ping (the kernel
// keeps the routes while weftd restarts).
func upgradeRollback(t *testing.T, ctx context.Context, c *kubecluster.Cluster, cfg *action.Configuration, name string, a, b pod) {
	t.Helper()
	ds, err := c.Admin.AppsV1().DaemonSets("kube-flannel").Get(ctx, "weft", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := ds.Spec.Template.Spec.Containers[0].Image
	ref, _, _ := strings.Cut(old, "@") // the name containerd imported the image under
	i := strings.LastIndex(ref, ":")
	if i < strings.LastIndex(ref, "/") {
		t.Fatalf("image %q has no tag", old)
	}
	repo, tag := ref[:i], ref[i+1:]
	next := repo + ":" + tag + "-next"
	for _, n := range c.Nodes {
		if out, err := n.Ctr(ctx, "-n", "k8s.io", "images", "tag", ref, next); err != nil {
			t.Fatalf("%s: %v: %s", n.Name, err, out)
		}
	}
	ch, err := loader.Load(filepath.Join("..", "deploy", "chart", "weft"))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		what  string
		image string
		run   func() error
	}{
		{"helm upgrade", next, func() error {
			u := action.NewUpgrade(cfg)
			u.Namespace, u.ReuseValues, u.Wait, u.Timeout = "kube-flannel", true, true, 4*time.Minute
			vals := map[string]any{"flannel": map[string]any{"image": map[string]any{"tag": tag + "-next", "digest": ""}}}
			_, err := u.RunWithContext(ctx, name, ch, vals)
			return err
		}},
		{"helm rollback", old, func() error {
			r := action.NewRollback(cfg)
			r.Version, r.Wait, r.Timeout = 1, true, 4*time.Minute
			return r.Run(name)
		}},
	} {
		func() {
			p := startPing(t, ctx, a, b)
			defer p.kill()
			if err := step.run(); err != nil {
				logNetPods(t, ctx, c.Admin)
				t.Fatalf("%s: %v", step.what, err)
			}
			got, err := c.Admin.AppsV1().DaemonSets("kube-flannel").Get(ctx, "weft", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			awaitRolled(t, ctx, c, got.Generation, step.image)
			sent, received, gap := p.stop(t, ctx)
			t.Logf("%s to %s: %d pings every 10 ms, %d answered, longest gap %v", step.what, step.image, sent, received, gap)
			if received != sent {
				t.Errorf("%s: %d of %d pings lost while the DaemonSet rolled (host-gw: the kernel keeps forwarding, want none)", step.what, sent-received, sent)
			}
		}()
	}
	h := action.NewHistory(cfg)
	h.Max = 10
	revs, err := h.Run(name)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i].Version < revs[j].Version })
	var states []string
	for _, r := range revs {
		states = append(states, fmt.Sprintf("%d %s", r.Version, r.Info.Status))
	}
	if want := "1 superseded, 2 superseded, 3 deployed"; strings.Join(states, ", ") != want {
		t.Errorf("history %q, want %q", strings.Join(states, ", "), want)
	}
}

// helmConfig is helm's action configuration for the cluster: a kubeconfig with the
// admin's token (the installer's rights, not weftd's), dialled through the lab's
// router, with helm's discovery cache in a temporary directory.
func helmConfig(t *testing.T, c *kubecluster.Cluster, namespace string) *action.Configuration {
	t.Helper()
	kubeconfig, cache := c.API.Kubeconfig, t.TempDir()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.CacheDir, flags.Namespace = &kubeconfig, &cache, &namespace
	flags.WrapConfigFn = func(rc *rest.Config) *rest.Config {
		rc.Dial = c.Config.Dial
		return rc
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// uninstall runs helm uninstall and waits until every object the release made, and
// the release's own record, is gone.
func uninstall(t *testing.T, ctx context.Context, c *kubecluster.Cluster, cfg *action.Configuration, name string) {
	t.Helper()
	u := action.NewUninstall(cfg)
	u.Wait, u.Timeout = true, 2*time.Minute
	if _, err := u.Run(name); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	cs, ns := c.Admin, "kube-flannel"
	gets := map[string]func() error{
		"DaemonSet weft": func() error {
			_, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "weft", metav1.GetOptions{})
			return err
		},
		"ConfigMap kube-flannel-cfg": func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
			return err
		},
		"ServiceAccount flannel": func() error {
			_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "flannel", metav1.GetOptions{})
			return err
		},
		"ClusterRole flannel": func() error {
			_, err := cs.RbacV1().ClusterRoles().Get(ctx, "flannel", metav1.GetOptions{})
			return err
		},
		"ClusterRoleBinding flannel": func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, "flannel", metav1.GetOptions{})
			return err
		},
	}
	await(t, ctx, "release's objects deleted", func() (bool, string) {
		for what, get := range gets {
			if err := get(); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s: %v", what, err)
			}
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=weft"})
		if err != nil || len(pods.Items) > 0 {
			return false, fmt.Sprintf("weft pods left: %v", err)
		}
		return true, ""
	})
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("helm's release record left: %d secrets", len(secrets.Items))
	}
}
