package deploy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestCleanupManifest keeps weft-cleanup.yml in step with weft.yml and weftd: one
// DaemonSet in weft's namespace on the host network, everywhere weft runs, with
// make image's image, removing the firewall rules only (flanneld takes over the rest)
// in an init container, and without API access or privilege.
func TestCleanupManifest(t *testing.T) {
	o := load(t, "weft-cleanup.yml")
	if len(o.all) != 1 {
		t.Fatalf("%d objects, want only the DaemonSet", len(o.all))
	}
	ds := one(t, "DaemonSets", o.daemonSets)
	weft := one(t, "DaemonSets", load(t, "weft.yml").daemonSets)
	spec := ds.Spec.Template.Spec
	if ds.Namespace != weft.Namespace || ds.Name != "weft-cleanup" || !spec.HostNetwork {
		t.Errorf("DaemonSet %s/%s, host network %v: want kube-flannel/weft-cleanup on the host network", ds.Namespace, ds.Name, spec.HostNetwork)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the cleanup pods need no API token: set automountServiceAccountToken: false")
	}
	if !slices.EqualFunc(spec.Tolerations, weft.Spec.Template.Spec.Tolerations, func(a, b corev1.Toleration) bool { return a == b }) {
		t.Errorf("tolerations %v, want weft.yml's %v: every node weft ran on", spec.Tolerations, weft.Spec.Template.Spec.Tolerations)
	}
	cleanup := one(t, "init containers", spec.InitContainers)
	done := one(t, "containers", spec.Containers)
	image := imageRef(t)
	for _, c := range []corev1.Container{cleanup, done} {
		if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: image %q pull %q, want %q with IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, image)
		}
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
			!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
			t.Errorf("%s: security context %+v, want unprivileged with NET_ADMIN and NET_RAW", c.Name, sc)
		}
	}
	if want := []string{"/opt/bin/weftd", "cleanup", "--firewall-only"}; !slices.Equal(cleanup.Command, want) {
		t.Errorf("init container runs %q, want %q", cleanup.Command, want)
	}
	if want := []string{"/opt/bin/weftd", "cleanup", "--firewall-only", "--wait"}; !slices.Equal(done.Command, want) {
		t.Errorf("container runs %q, want %q", done.Command, want)
	}
}
