package kubetest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/weftnet/weft/bench/testenv"
)

func parseFile(t *testing.T, path string, skipOthers bool) Objects {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o, err := ParseRBAC(f, skipOthers)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return o
}

// TestRBACFile: deploy/rbac.yml grants exactly kube-flannel's rights to its
// ServiceAccount: pods get; nodes get, list, watch; nodes/status patch.
func TestRBACFile(t *testing.T) {
	o := parseFile(t, RBACFile("../.."), false)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	}
	if !reflect.DeepEqual(o.ClusterRole.Rules, want) {
		t.Fatalf("ClusterRole rules %+v, want %+v", o.ClusterRole.Rules, want)
	}
	b := o.ClusterRoleBinding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != o.ClusterRole.Name || len(b.Subjects) != 1 ||
		b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != ServiceAccount || b.Subjects[0].Namespace != Namespace {
		t.Fatalf("binding %+v", b)
	}
	if o.ServiceAccount.Name != ServiceAccount || o.ServiceAccount.Namespace != Namespace {
		t.Fatalf("ServiceAccount %s/%s", o.ServiceAccount.Namespace, o.ServiceAccount.Name)
	}
}

// TestRBACMatchesKubeFlannel compares deploy/rbac.yml with Documentation/kube-flannel.yml
// of the flannel release test/flannel builds.
func TestRBACMatchesKubeFlannel(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the flannel module (go mod download)")
	}
	testenv.NeedTools(t, "go")
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/flannel-io/flannel")
	cmd.Dir = "../../test/flannel"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download in test/flannel: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v: %s", err, out)
	}
	theirs := parseFile(t, filepath.Join(mod.Dir, "Documentation", "kube-flannel.yml"), true)
	ours := parseFile(t, RBACFile("../.."), false)
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"ClusterRole", ours.ClusterRole, theirs.ClusterRole},
		{"ClusterRoleBinding", ours.ClusterRoleBinding, theirs.ClusterRoleBinding},
		{"ServiceAccount", ours.ServiceAccount, theirs.ServiceAccount},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s differs from kube-flannel.yml's:\n ours   %+v\n theirs %+v", c.what, c.got, c.want)
		}
	}
}
