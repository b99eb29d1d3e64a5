package deploy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/weftnet/weft/checkconfig"
)

// TestCheckConfigKnowsWeftYML: what `weftd check-config --daemonset` calls weft's own
// (checkconfig.WeftArgs, WeftEnv, WeftTolerations, WeftResources) is weft.yml's.
func TestCheckConfigKnowsWeftYML(t *testing.T) {
	ds := one(t, "DaemonSets", load(t, "weft.yml").daemonSets)
	c := one(t, "containers", ds.Spec.Template.Spec.Containers)
	if !slices.Equal(c.Args, checkconfig.WeftArgs) {
		t.Errorf("weft.yml's args %q, checkconfig.WeftArgs %q", c.Args, checkconfig.WeftArgs)
	}
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name)
	}
	if !slices.Equal(env, checkconfig.WeftEnv) {
		t.Errorf("weft.yml's env %q, checkconfig.WeftEnv %q", env, checkconfig.WeftEnv)
	}
	if !slices.EqualFunc(ds.Spec.Template.Spec.Tolerations, checkconfig.WeftTolerations, func(a, b corev1.Toleration) bool { return a == b }) {
		t.Errorf("weft.yml's tolerations %v, checkconfig.WeftTolerations %v", ds.Spec.Template.Spec.Tolerations, checkconfig.WeftTolerations)
	}
	if !equality.Semantic.DeepEqual(c.Resources, checkconfig.WeftResources) {
		t.Errorf("weft.yml's resources %v, checkconfig.WeftResources %v", c.Resources, checkconfig.WeftResources)
	}
}
