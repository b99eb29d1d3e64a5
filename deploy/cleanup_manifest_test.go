package deploy

import (
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestCleanupManifest keeps weft-cleanup.yml in step with weft.yml and weftd: one
// DaemonSet in weft's namespace on the host network, everywhere weft runs, with
// make image's image, handing the node to flanneld (--firewall-only, with the node's
// marks through the API, the node from NODE_NAME) in an init container, without
// privilege, as a ServiceAccount of its own (flannel's is gone after `helm uninstall`
// on k3s and RKE2) that may get nodes and patch nodes/status and nothing else.
func TestCleanupManifest(t *testing.T) {
	o := load(t, "weft-cleanup.yml")
	if len(o.all) != 4 {
		t.Fatalf("%d objects, want the ClusterRole, its binding, the ServiceAccount and the DaemonSet", len(o.all))
	}
	ds := one(t, "DaemonSets", o.daemonSets)
	role := one(t, "ClusterRoles", o.roles)
	binding := one(t, "ClusterRoleBindings", o.bindings)
	account := one(t, "ServiceAccounts", o.accounts)
	weft := one(t, "DaemonSets", load(t, "weft.yml").daemonSets)
	spec := ds.Spec.Template.Spec
	if ds.Namespace != weft.Namespace || ds.Name != "weft-cleanup" || !spec.HostNetwork {
		t.Errorf("DaemonSet %s/%s, host network %v: want kube-flannel/weft-cleanup on the host network", ds.Namespace, ds.Name, spec.HostNetwork)
	}
	if spec.ServiceAccountName != account.Name || account.Namespace != ds.Namespace || account.Name == weft.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("ServiceAccount %q (made: %s/%s), want its own, not flannel's %q", spec.ServiceAccountName,
			account.Namespace, account.Name, weft.Spec.Template.Spec.ServiceAccountName)
	}
	if rules := roleRules(role); !slices.Equal(rules, []string{"nodes/status:patch", "nodes:get"}) {
		t.Errorf("ClusterRole %s allows %v, want exactly nodes:get and nodes/status:patch", role.Name, rules)
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != account.Name ||
		binding.Subjects[0].Namespace != account.Namespace {
		t.Errorf("ClusterRoleBinding %+v does not bind %s to %s/%s", binding, role.Name, account.Namespace, account.Name)
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
	if want := []string{"/opt/bin/weftd", "cleanup", "--firewall-only", "--kube-subnet-mgr"}; !slices.Equal(cleanup.Command, want) {
		t.Errorf("init container runs %q, want %q", cleanup.Command, want)
	}
	if want := []string{"/opt/bin/weftd", "cleanup", "--firewall-only", "--kube-subnet-mgr", "--wait"}; !slices.Equal(done.Command, want) {
		t.Errorf("container runs %q, want %q", done.Command, want)
	}
	checkNodeName(t, cleanup, done)
}

// checkNodeName: each container finds its node from NODE_NAME, set to the pod's node.
func checkNodeName(t *testing.T, cs ...corev1.Container) {
	t.Helper()
	for _, c := range cs {
		ok := false
		for _, e := range c.Env {
			ok = ok || e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
				e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
		}
		if !ok {
			t.Errorf("%s: no NODE_NAME from spec.nodeName in %+v", c.Name, c.Env)
		}
	}
}

// TestUninstallManifest: weft-uninstall.yml is a DaemonSet of its own namespace on the
// host network, everywhere weft runs, with make image's image, running `weftd cleanup
// --uninstall --kube-subnet-mgr` with the files weft.yml's init containers install,
// as a ServiceAccount that may get nodes and patch nodes/status and nothing else.
func TestUninstallManifest(t *testing.T) {
	o := load(t, "weft-uninstall.yml")
	ns := one(t, "Namespaces", o.namespaces)
	role := one(t, "ClusterRoles", o.roles)
	binding := one(t, "ClusterRoleBindings", o.bindings)
	account := one(t, "ServiceAccounts", o.accounts)
	ds := one(t, "DaemonSets", o.daemonSets)
	weft := one(t, "DaemonSets", load(t, "weft.yml").daemonSets)
	spec := ds.Spec.Template.Spec
	if ds.Namespace != ns.Name || account.Namespace != ns.Name || spec.ServiceAccountName != account.Name || !spec.HostNetwork {
		t.Errorf("DaemonSet %s/%s as %s/%s in namespace %s (host network %v): want all in one namespace, on the host network",
			ds.Namespace, ds.Name, account.Namespace, spec.ServiceAccountName, ns.Name, spec.HostNetwork)
	}
	if ns.Name == weft.Namespace {
		t.Errorf("namespace %s is weft.yml's, which kubectl delete -f weft.yml removes first", ns.Name)
	}
	if rules, want := roleRules(role), []string{"nodes/status:patch", "nodes:get"}; !slices.Equal(rules, want) {
		t.Errorf("ClusterRole %s allows %v, want exactly %v", role.Name, rules, want)
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != account.Name ||
		binding.Subjects[0].Namespace != account.Namespace {
		t.Errorf("ClusterRoleBinding %+v does not bind %s to %s/%s", binding, role.Name, account.Namespace, account.Name)
	}
	if !slices.EqualFunc(spec.Tolerations, weft.Spec.Template.Spec.Tolerations, func(a, b corev1.Toleration) bool { return a == b }) {
		t.Errorf("tolerations %v, want weft.yml's %v", spec.Tolerations, weft.Spec.Template.Spec.Tolerations)
	}
	uninstall := one(t, "init containers", spec.InitContainers)
	done := one(t, "containers", spec.Containers)
	image := imageRef(t)
	for _, c := range []corev1.Container{uninstall, done} {
		if c.Image != image {
			t.Errorf("%s: image %q, want %q", c.Name, c.Image, image)
		}
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged {
			t.Errorf("%s: security context %+v, want unprivileged", c.Name, sc)
		}
	}
	checkNodeName(t, uninstall, done)
	if len(uninstall.Command) < 5 || !slices.Equal(uninstall.Command[:4], []string{"/opt/bin/weftd", "cleanup", "--uninstall", "--kube-subnet-mgr"}) {
		t.Fatalf("init container runs %q, want weftd cleanup --uninstall --kube-subnet-mgr --remove-files=…", uninstall.Command)
	}
	// Every file weft.yml's init containers install is removed, in a mounted directory.
	files, ok := strings.CutPrefix(uninstall.Command[4], "--remove-files=")
	if !ok {
		t.Fatalf("init container's last argument %q, want --remove-files=", uninstall.Command[4])
	}
	mounted := map[string]bool{}
	for _, m := range uninstall.VolumeMounts {
		mounted[m.MountPath] = true
	}
	for _, c := range weft.Spec.Template.Spec.InitContainers {
		dst := c.Args[len(c.Args)-1]
		if !slices.Contains(strings.Split(files, ","), dst) {
			t.Errorf("weft.yml's %s installs %s, which the uninstall leaves", c.Name, dst)
		}
	}
	for _, f := range strings.Split(files, ",") {
		if !mounted[path.Dir(f)] {
			t.Errorf("%s is removed from %s, which the init container does not mount", f, path.Dir(f))
		}
	}
}

// roleRules lists a ClusterRole's rules as sorted "resource:verb" pairs.
func roleRules(role *rbacv1.ClusterRole) []string {
	var rules []string
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				rules = append(rules, res+":"+v)
			}
		}
	}
	slices.Sort(rules)
	return rules
}
