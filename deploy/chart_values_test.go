package deploy

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// TestChartFlannelValuesFile renders the chart with a values file written for
// flannel's chart and checks that each value lands where it says.
func TestChartFlannelValuesFile(t *testing.T) {
	o := mustRender(t, readValues(t, "testdata/flannel-values.yaml"))
	cm := one(t, "ConfigMaps", o.configMaps)
	want := `{"Backend":{"Type":"host-gw"},"EnableNFTables":true,"Network":"198.18.0.0/16"}`
	if got := normJSON(t, cm.Data["net-conf.json"]); got != want {
		t.Errorf("net-conf.json %s, want %s", got, want)
	}
	ds := one(t, "DaemonSets", o.daemonSets)
	spec := ds.Spec.Template.Spec
	c := one(t, "containers", spec.Containers)
	if want := []string{"--ip-masq", "--kube-subnet-mgr", "--iface=eth1", "--healthz-port=8082"}; !reflect.DeepEqual(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if len(c.Ports) != 0 || c.LivenessProbe == nil || c.ReadinessProbe == nil ||
		c.LivenessProbe.HTTPGet.Port.IntValue() != 8082 || c.ReadinessProbe.HTTPGet.Port.IntValue() != 8082 {
		t.Errorf("healthz port 8082: ports %+v, probes %v %v", c.Ports, c.LivenessProbe, c.ReadinessProbe)
	}
	// helm merges maps of values: the file's requests, the chart's memory limit.
	wantRes := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("50Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("192Mi")},
	}
	if !reflect.DeepEqual(c.Resources, wantRes) {
		t.Errorf("resources %+v, want %+v", c.Resources, wantRes)
	}
	wantTol := []corev1.Toleration{{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
		{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists}}
	if !reflect.DeepEqual(spec.Tolerations, wantTol) {
		t.Errorf("tolerations %+v", spec.Tolerations)
	}
	if !reflect.DeepEqual(spec.NodeSelector, map[string]string{"node-role.example/net": "true"}) {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if !reflect.DeepEqual(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("imagePullSecrets %v", spec.ImagePullSecrets)
	}
	if p := hostPath(spec, "cni-plugin"); p != "/usr/libexec/cni" {
		t.Errorf("cni-plugin volume %q, want flannel.cniBinDir", p)
	}
	// flannel_cni.image is ignored: the plugin comes from weft's image.
	weftImage := c.Image
	for _, ic := range spec.InitContainers {
		if ic.Image != weftImage {
			t.Errorf("init container %s runs %s, want weft's image %s", ic.Name, ic.Image, weftImage)
		}
	}
	if c.SecurityContext.Privileged == nil || *c.SecurityContext.Privileged {
		t.Errorf("host-gw: weftd should not be privileged")
	}
}

func hostPath(spec corev1.PodSpec, name string) string {
	for _, v := range spec.Volumes {
		if v.Name == name && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	return ""
}

// TestChartNetConf maps flannel's chart values to net-conf.json, backend by backend.
func TestChartNetConf(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals string // YAML
		want string // net-conf.json, normalised
	}{
		{"vxlan options", "flannel: {backend: vxlan, backendPort: 4789, vni: 4096, GBP: true, directRouting: true, mtu: 1450, macPrefix: 0E-2A}",
			`{"Backend":{"DirectRouting":true,"GBP":true,"MTU":1450,"MacPrefix":"0E-2A","Port":4789,"Type":"vxlan","VNI":4096},"Network":"10.244.0.0/16"}`},
		{"wireguard options", "flannel: {backend: wireguard, backendPort: 51830, backendPortv6: 51831, psk: abc=, mtu: 1420, tunnelMode: auto, keepaliveInterval: 25}",
			`{"Backend":{"ListenPort":51830,"ListenPortV6":51831,"MTU":1420,"Mode":"auto","PSK":"abc=","PersistentKeepaliveInterval":25,"Type":"wireguard"},"Network":"10.244.0.0/16"}`},
		{"udp port", "flannel: {backend: udp, backendPort: 8300}",
			`{"Backend":{"Port":8300,"Type":"udp"},"Network":"10.244.0.0/16"}`},
		{"host-gw ignores vxlan keys", "flannel: {backend: host-gw, vni: 7, backendPort: 1}",
			`{"Backend":{"Type":"host-gw"},"Network":"10.244.0.0/16"}`},
		{"dual stack", "{podCidr: 198.18.0.0/16, podCidrv6: 'fd00:db8::/48'}",
			`{"Backend":{"Type":"vxlan"},"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Network":"198.18.0.0/16"}`},
		{"ipv6 only", "{podCidr: '', podCidrv6: 'fd00:db8::/48'}",
			`{"Backend":{"Type":"vxlan"},"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48"}`},
		{"nftables", "flannel: {enableNFTables: true}",
			`{"Backend":{"Type":"vxlan"},"EnableNFTables":true,"Network":"10.244.0.0/16"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := one(t, "ConfigMaps", mustRender(t, yamlValues(t, tc.vals)).configMaps)
			if got := normJSON(t, cm.Data["net-conf.json"]); got != tc.want {
				t.Errorf("net-conf.json\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestChartDaemonSetValues checks the values that shape the DaemonSet.
func TestChartDaemonSetValues(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name  string
		vals  string
		check func(t *testing.T, spec corev1.PodSpec)
	}{
		{"udp is privileged", "flannel: {backend: udp}", func(t *testing.T, spec corev1.PodSpec) {
			if p := spec.Containers[0].SecurityContext.Privileged; p == nil || !*p {
				t.Errorf("udp: weftd not privileged")
			}
		}},
		{"image with digest", "flannel: {image: {repository: registry.example/weftd, tag: '1.2', digest: '" + digest + "'}}",
			func(t *testing.T, spec corev1.PodSpec) {
				want := "registry.example/weftd:1.2@" + digest
				for _, c := range append(spec.InitContainers, spec.Containers...) {
					if c.Image != want {
						t.Errorf("%s: image %s, want %s", c.Name, c.Image, want)
					}
				}
			}},
		{"no healthz", "flannel: {healthz: {port: 0}}", func(t *testing.T, spec corev1.PodSpec) {
			c := spec.Containers[0]
			if !reflect.DeepEqual(c.Args, []string{"--ip-masq", "--kube-subnet-mgr"}) || c.Ports != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil {
				t.Errorf("healthz off: args %q ports %v probes %v %v", c.Args, c.Ports, c.LivenessProbe, c.ReadinessProbe)
			}
		}},
		{"skip CNI config", "flannel: {skipCNIConfigInstallation: true, cniConfDir: /etc/other}", func(t *testing.T, spec corev1.PodSpec) {
			if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "install-cni-plugin" {
				t.Errorf("init containers %d, want install-cni-plugin alone", len(spec.InitContainers))
			}
			if p := hostPath(spec, "cni"); p != "/etc/other" {
				t.Errorf("cni volume %q", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := one(t, "DaemonSets", mustRender(t, yamlValues(t, tc.vals)).daemonSets)
			tc.check(t, ds.Spec.Template.Spec)
		})
	}
}

// TestChartRefuses: values weft cannot honour fail the render with a message naming them.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct{ vals, want string }{
		{"flannel: {backend: ipip}", `flannel.backend "ipip"`},
		{"flannel: {image: {repository: ghcr.io/flannel-io/flannel, tag: v0.28.10}}", "names flannel's image"},
		{"flannel: {image: {digest: sha256:abc}}", "flannel.image.digest must be"},
		{"flannel: {image: {digest: 'sha256:" + strings.Repeat("A", 64) + "'}}", "flannel.image.digest must be"},
		{"{podCidr: '', podCidrv6: ''}", "podCidr and podCidrv6 are both empty"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := renderChart(t, chartDir, yamlValues(t, tc.vals))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %s: error %v, want one containing %q", tc.vals, err, tc.want)
			}
		})
	}
}

// yamlValues parses values given as YAML (flow style), as helm reads a values file.
func yamlValues(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// TestChartPodMonitor: metrics.podMonitor.enabled makes a PodMonitor that scrapes the
// DaemonSet's pods on their healthz port at /metrics, with the labels and interval
// given; off (the default) there is none (decode refuses a kind it does not know), and
// without a healthz port it is refused.
func TestChartPodMonitor(t *testing.T) {
	mustRender(t, nil)
	vals := yamlValues(t, "metrics:\n  podMonitor:\n    enabled: true\n    interval: 15s\n    labels:\n      release: prom\n")
	m, err := renderChart(t, chartDir, vals)
	if err != nil {
		t.Fatal(err)
	}
	var pm struct {
		APIVersion, Kind string
		Metadata         struct {
			Name, Namespace string
			Labels          map[string]string
		}
		Spec struct {
			Selector            struct{ MatchLabels map[string]string }
			PodMetricsEndpoints []struct {
				Path, Interval string
				Relabelings    []struct {
					SourceLabels                            []string
					Regex, TargetLabel, Replacement, Action string
				}
			}
		}
	}
	var pods map[string]string
	for _, doc := range strings.Split(m, "\n---") {
		if strings.Contains(doc, "kind: PodMonitor") {
			if err := yaml.UnmarshalStrict([]byte(doc), &pm); err != nil {
				t.Fatalf("PodMonitor: %v\n%s", err, doc)
			}
		}
		if strings.Contains(doc, "kind: DaemonSet") {
			var ds appsv1.DaemonSet
			if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
			pods = ds.Spec.Template.Labels
		}
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" || pm.Metadata.Namespace != "kube-flannel" ||
		pm.Metadata.Labels["release"] != "prom" {
		t.Fatalf("PodMonitor %+v", pm)
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if pods[k] != v {
			t.Errorf("the PodMonitor selects %s=%s; the DaemonSet's pods are %v", k, v, pods)
		}
	}
	if len(pm.Spec.Selector.MatchLabels) == 0 || len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor spec %+v", pm.Spec)
	}
	e := pm.Spec.PodMetricsEndpoints[0]
	if e.Path != "/metrics" || e.Interval != "15s" {
		t.Errorf("endpoint %+v, want /metrics, 15s", e)
	}
	// One target per pod, weftd's container: with no port declared, Prometheus makes
	// one of every container.
	keep := false
	for _, r := range e.Relabelings {
		keep = keep || r.Action == "keep" && len(r.SourceLabels) == 1 &&
			r.SourceLabels[0] == "__meta_kubernetes_pod_container_name" && r.Regex == "weft"
	}
	if !keep {
		t.Errorf("relabelings %+v keep every container's target, want only weft's", e.Relabelings)
	}
	// The pods declare no port: the address is the pod's IP and the healthz port, in
	// brackets for IPv6.
	for ip, want := range map[string]string{"192.0.2.7": "192.0.2.7:8081", "2001:db8::7": "[2001:db8::7]:8081"} {
		addr := ""
		for _, r := range e.Relabelings {
			if len(r.SourceLabels) == 1 && r.SourceLabels[0] == "__meta_kubernetes_pod_ip" && r.TargetLabel == "__address__" {
				re := regexp.MustCompile("^(?:" + r.Regex + ")$")
				if re.MatchString(ip) {
					addr = re.ReplaceAllString(ip, r.Replacement)
				}
			}
		}
		if addr != want {
			t.Errorf("pod IP %s scraped at %q, want %q", ip, addr, want)
		}
	}
	vals = yamlValues(t, "metrics:\n  podMonitor:\n    enabled: true\nflannel:\n  healthz:\n    port: 0\n")
	if _, err := renderChart(t, chartDir, vals); err == nil || !strings.Contains(err.Error(), "flannel.healthz.port") {
		t.Errorf("podMonitor without a healthz port: %v, want a refusal naming flannel.healthz.port", err)
	}
}
