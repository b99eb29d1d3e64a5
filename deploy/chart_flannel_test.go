package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/weftnet/weft/bench/testenv"
)

// flannelChart is flannel's own chart (chart/kube-flannel) of the flanneld that
// test/flannel pins, from the Go module cache.
func flannelChart(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/flannel-io/flannel")
	cmd.Dir = filepath.Join("..", "test", "flannel")
	out, err := cmd.Output()
	dir := filepath.Join(strings.TrimSpace(string(out)), "chart", "kube-flannel")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "values.yaml"))
	}
	testenv.Need(t, err == nil, "flannel's chart in the Go module cache (make flanneld downloads its module)")
	return dir
}

// TestChartMatchesFlannelChart renders flannel's chart and weft's with the same values
// files and compares what both charts control: net-conf.json and cni-conf.json, the
// daemon's arguments, probes, resources, placement, pull secrets and host directories.
func TestChartMatchesFlannelChart(t *testing.T) {
	dir := flannelChart(t)
	for _, tc := range []struct{ name, vals string }{
		{"defaults with podCidr", "{podCidr: 198.18.0.0/16}"},
		{"flannel values file", ""},
		{"vxlan options", "flannel: {backend: vxlan, backendPort: 4789, vni: 4096, GBP: true, directRouting: true, mtu: 1450, macPrefix: 0E-2A}"},
		// Not tunnelMode: flannel's chart writes it unquoted, which is not JSON.
		{"wireguard options", "flannel: {backend: wireguard, backendPort: 51830, backendPortv6: 51831, psk: abc=, mtu: 1420, keepaliveInterval: 25}"},
		{"udp port", "flannel: {backend: udp, backendPort: 8300}"},
		{"dual stack", "{podCidr: 198.18.0.0/16, podCidrv6: 'fd00:db8::/48'}"},
		{"ipv6 only", "{podCidr: '', podCidrv6: 'fd00:db8::/48', flannel: {enableNFTables: true}}"},
		{"no healthz, no CNI config", "flannel: {healthz: {port: 0}, skipCNIConfigInstallation: true, cniBinDir: /usr/libexec/cni}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := yamlValues(t, tc.vals)
			if tc.vals == "" {
				vals = readValues(t, "testdata/flannel-values.yaml")
			}
			m, err := renderChart(t, dir, vals)
			if err != nil {
				t.Fatalf("flannel's chart: %v", err)
			}
			theirs := decode(t, []byte(m))
			ours := mustRender(t, vals)
			tcm, ocm := one(t, "flannel ConfigMaps", theirs.configMaps), one(t, "ConfigMaps", ours.configMaps)
			for _, k := range []string{"net-conf.json", "cni-conf.json"} {
				if th, o := normJSON(t, tcm.Data[k]), normJSON(t, ocm.Data[k]); th != o {
					t.Errorf("%s\n flannel's chart: %s\n weft's chart:    %s", k, th, o)
				}
			}
			compareDaemonSets(t, one(t, "flannel DaemonSets", theirs.daemonSets), one(t, "DaemonSets", ours.daemonSets))
		})
	}
}

func compareDaemonSets(t *testing.T, theirs, ours *appsv1.DaemonSet) {
	t.Helper()
	fs, ws := theirs.Spec.Template.Spec, ours.Spec.Template.Spec
	fc, wc := fs.Containers[0], ws.Containers[0]
	// flanneld's arguments are in its command after the binary; weftd's are its args.
	if !reflect.DeepEqual(fc.Command[1:], wc.Args) {
		t.Errorf("arguments: flannel's chart %q, weft's %q", fc.Command[1:], wc.Args)
	}
	same := func(what string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: flannel's chart %+v, weft's %+v", what, a, b)
		}
	}
	// weft declares no port (docs/compatibility.md): its probes give the number
	// flannel's name.
	same("ports", []corev1.ContainerPort(nil), wc.Ports)
	same("liveness probe", numberedProbe(fc.LivenessProbe, fc.Ports), wc.LivenessProbe)
	same("readiness probe", numberedProbe(fc.ReadinessProbe, fc.Ports), wc.ReadinessProbe)
	same("node selector", fs.NodeSelector, ws.NodeSelector)
	same("pull secrets", fs.ImagePullSecrets, ws.ImagePullSecrets)
	same("affinity", fs.Affinity, ws.Affinity)
	for _, v := range []string{"cni-plugin", "cni", "run", "xtables-lock"} {
		same("volume "+v, hostPath(fs, v), hostPath(ws, v))
	}
	names := func(cs []corev1.Container) (n []string) {
		for _, c := range cs {
			n = append(n, c.Name)
		}
		return n
	}
	same("init containers", names(fs.InitContainers), names(ws.InitContainers))
}

// TestChartNetpolMatchesFlannelChart: netpol.enabled (with flannel's chart's values
// shape, its defaults and given ones) renders the kube-network-policies container,
// its volume and its rights as flannel's chart does; off, neither chart has them.
func TestChartNetpolMatchesFlannelChart(t *testing.T) {
	dir := flannelChart(t)
	for _, vals := range []string{"netpol: {enabled: true}",
		"netpol: {enabled: true, args: ['--v=4'], image: {repository: registry.example/netpol, tag: v9}}", "netpol: {enabled: false}"} {
		t.Run(vals, func(t *testing.T) {
			m, err := renderChart(t, dir, yamlValues(t, vals))
			if err != nil {
				t.Fatalf("flannel's chart: %v", err)
			}
			theirs, ours := decode(t, []byte(m)), mustRender(t, yamlValues(t, vals))
			sidecar := func(ds *appsv1.DaemonSet) *corev1.Container {
				for i, c := range ds.Spec.Template.Spec.Containers {
					if c.Name == "kube-network-policies" {
						return &ds.Spec.Template.Spec.Containers[i]
					}
				}
				return nil
			}
			fds, wds := one(t, "flannel DaemonSets", theirs.daemonSets), one(t, "DaemonSets", ours.daemonSets)
			fc, wc := sidecar(fds), sidecar(wds)
			if !reflect.DeepEqual(fc, wc) {
				t.Errorf("kube-network-policies container:\n flannel's chart %+v\n weft's          %+v", fc, wc)
			}
			if strings.Contains(vals, "true") && fc == nil {
				t.Fatal("flannel's chart rendered no kube-network-policies container")
			}
			if f, w := hostPath(fds.Spec.Template.Spec, "lib-modules"), hostPath(wds.Spec.Template.Spec, "lib-modules"); f != w {
				t.Errorf("lib-modules: flannel's chart %q, weft's %q", f, w)
			}
			rules := func(o *objects) []string {
				var out []string
				for _, r := range one(t, "ClusterRoles", o.roles).Rules {
					for _, g := range r.APIGroups {
						if g == "" {
							continue // the daemon's own rules (weft's are narrower: no pods list)
						}
						for _, res := range r.Resources {
							for _, v := range r.Verbs {
								out = append(out, g+"/"+res+":"+v)
							}
						}
					}
				}
				slices.Sort(out)
				return out
			}
			if f, w := rules(theirs), rules(ours); !slices.Equal(f, w) {
				t.Errorf("ClusterRole rules beyond the core group: flannel's chart %v, weft's %v", f, w)
			}
		})
	}
}
