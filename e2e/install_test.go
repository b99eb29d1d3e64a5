package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/weftnet/weft/bench/kubecluster"
)

// weftInstall is one way a user puts weft on a cluster, with the vxlan backend over
// the cluster's pod network, and EnableNFTables when nft is set.
type weftInstall struct {
	name    string
	install func(t *testing.T, ctx context.Context, c *kubecluster.Cluster, nft bool)
}

// weftInstalls: kubectl apply of deploy/weft.yml with its net-conf.json edited, and
// helm install of deploy/chart/weft with a flannel-style values file.
var weftInstalls = []weftInstall{
	{"weft.yml", applyWeftYML},
	{"helm", func(t *testing.T, ctx context.Context, c *kubecluster.Cluster, nft bool) {
		helmInstall(t, ctx, c, fmt.Sprintf(helmVXLANValues, kubecluster.ClusterCIDR, nft))
	}},
}

// applyWeftYML creates deploy/weft.yml's objects, net-conf.json set to vxlan on the
// cluster's pod network (and "EnableNFTables": true with nft).
func applyWeftYML(t *testing.T, ctx context.Context, c *kubecluster.Cluster, nft bool) {
	t.Helper()
	vxlan := dsNetConf(t, "vxlan")
	applyManifest(t, ctx, c.Admin, filepath.Join("..", "deploy", "weft.yml"), func(obj kruntime.Object) bool {
		keep := vxlan(obj)
		if cm, ok := obj.(*corev1.ConfigMap); ok && nft {
			cm.Data["net-conf.json"] = strings.Replace(cm.Data["net-conf.json"], "{", `{"EnableNFTables": true, `, 1)
		}
		return keep
	})
}

// helmVXLANValues is a values file in the style of flannel's chart for vxlan, with
// flannel.enableNFTables as given.
const helmVXLANValues = `
podCidr: %q
flannel:
  backend: vxlan
  enableNFTables: %t
  args:
  - "--ip-masq"
  - "--kube-subnet-mgr"
`

// helmInstall makes the kube-flannel namespace as deploy/README.md says and installs
// deploy/chart/weft there as release "weft" with values, as the cluster's admin (helm's
// install action, waiting for the DaemonSet). It returns helm's configuration and the
// release.
func helmInstall(t *testing.T, ctx context.Context, c *kubecluster.Cluster, values string) (*action.Configuration, *release.Release) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := c.Admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, c, ns.Name)
	ch, err := loader.Load(filepath.Join("..", "deploy", "chart", "weft"))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = "weft", ns.Name
	inst.Wait, inst.Timeout = true, 4*time.Minute
	rel, err := inst.RunWithContext(ctx, ch, vals.AsMap())
	if err != nil {
		logNetPods(t, ctx, c.Admin)
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install: release %s revision %d %s", rel.Name, rel.Version, rel.Info.Status)
	return cfg, rel
}
