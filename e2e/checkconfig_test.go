package e2e

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	client "go.etcd.io/etcd/client/v2"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/bench/etcdtest"
	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/testenv"
)

// The configs check-config is run on: one weftd takes, one it refuses.
const (
	checkAccepted = `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","VNI":7,"DirectRouting":true}}`
	checkRefused  = `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","DirectRuoting":true}}`
)

// checkRun is one run of weftd check-config: its exit status and outputs.
type checkRun struct {
	code           int
	stdout, stderr string
}

// checkConfigRun runs bin check-config with args and env (besides PATH).
func checkConfigRun(t *testing.T, bin string, env []string, args ...string) checkRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"check-config"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := checkRun{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("weftd check-config: %v", err)
	}
	t.Logf("weftd check-config %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// expect fails t unless the run exited with code and its stdout holds every want.
func (r checkRun) expect(t *testing.T, what string, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, r.code, code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) && !strings.Contains(r.stderr, w) {
			t.Errorf("%s: output lacks %q\nstdout:\n%s\nstderr:\n%s", what, w, r.stdout, r.stderr)
		}
	}
}

// TestCheckConfig runs bin/weftd check-config on configs in a real etcd (TLS with client
// certificates, as the reader user, who may read <prefix>/config and nothing else; on
// the v3 API with flags and on the v2 API from FLANNELD_* variables) and in a real
// kube-apiserver's kube-flannel ConfigMap (as a ServiceAccount that may only get that
// ConfigMap): an accepted config exits 0 and says what weftd does with it, a refused one
// exits 1 with weftd's reason, and a source that cannot be read (an etcd user without
// the right, deploy/rbac.yml's identity, which has no right on ConfigMaps) exits 2.
func TestCheckConfig(t *testing.T) {
	testenv.SkipShort(t, "a real etcd and kube-apiserver")
	testenv.NeedTools(t, "etcd", "go")
	bin := weftd(t)
	t.Run("etcd", func(t *testing.T) { checkConfigEtcd(t, bin) })
	t.Run("kube", func(t *testing.T) { checkConfigKube(t, bin) })
}

func checkConfigEtcd(t *testing.T, bin string) {
	const pfx = "/weft-check/network"
	sec := etcdtest.StartSecure(t)
	sec.SetupAuth(t, pfx)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v3, v2 := sec.V3(t), client.NewKeysAPI(sec.V2(t))
	put := func(v3Value, v2Value string) {
		t.Helper()
		if _, err := v3.Put(ctx, pfx+"/config", v3Value); err != nil {
			t.Fatal(err)
		}
		if _, err := v2.Set(ctx, pfx+"/config", v2Value, nil); err != nil {
			t.Fatal(err)
		}
	}
	tls := []string{"--etcd-cafile=" + sec.CA.CertFile, "--etcd-certfile=" + sec.Client.CertFile, "--etcd-keyfile=" + sec.Client.KeyFile}
	flags := func(user, password string, more ...string) []string {
		return append(append([]string{"--etcd-endpoints=" + sec.Endpoint(), "--etcd-prefix=" + pfx,
			"--etcd-username=" + user, "--etcd-password=" + password}, tls...), more...)
	}
	// The v2 runs take everything from the environment, as weftd would.
	env := []string{"FLANNELD_ETCD_ENDPOINTS=" + sec.Endpoint(), "FLANNELD_ETCD_PREFIX=" + pfx, "FLANNELD_ETCD_API=v2",
		"FLANNELD_ETCD_CAFILE=" + sec.CA.CertFile, "FLANNELD_ETCD_CERTFILE=" + sec.Client.CertFile,
		"FLANNELD_ETCD_KEYFILE=" + sec.Client.KeyFile,
		"FLANNELD_ETCD_USERNAME=" + etcdtest.ReaderUser, "FLANNELD_ETCD_PASSWORD=" + etcdtest.ReaderSecret}

	put(checkAccepted, `{"Network":"198.18.0.0/16","Backend":{"Type":"host-gw"}}`)
	checkConfigRun(t, bin, nil, flags(etcdtest.ReaderUser, etcdtest.ReaderSecret)...).expect(t, "v3, accepted", 0,
		"source: etcd "+sec.Endpoint()+" key "+pfx+"/config (API v3)",
		"Network 198.18.0.0/16: subnets of /24", "etcd mode", "flannel.7: VXLAN device, VNI 7",
		"DirectRouting true", "[lease-host-id]", "accepted: weftd would run this config")
	checkConfigRun(t, bin, env).expect(t, "v2, accepted", 0,
		"(API v2)", "backend host-gw:", "accepted: weftd would run this config")

	put(checkRefused, `{"Network":"198.18.0.0/16","Backend":{"Type":"ipip"}}`)
	checkConfigRun(t, bin, nil, flags(etcdtest.ReaderUser, etcdtest.ReaderSecret)...).expect(t, "v3, refused", 1,
		`refused: bad backend option: vxlan backend has no option "DirectRuoting"`, "[strict-options]",
		"weftd would stop at start with status 1")
	checkConfigRun(t, bin, env).expect(t, "v2, refused", 1,
		`refused: unknown backend type "ipip": weft has no ipip backend`, "flanneld runs the ipip backend")

	// A user without the right to read this prefix's config: nothing to judge.
	r := checkConfigRun(t, bin, nil, flags(etcdtest.OutsiderUser, etcdtest.OutsiderSecret)...)
	r.expect(t, "outsider", 2, "permission denied")
	if strings.Contains(r.stdout, "refused") || strings.Contains(r.stdout, "accepted") {
		t.Errorf("outsider: a verdict without a config:\n%s", r.stdout)
	}
}

func checkConfigKube(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	apiBin, err := kubeproc.Binary(ctx, "..")
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv, err := kubeproc.Start(ctx, kubeproc.Options{Binary: apiBin, Etcd: etcd.Endpoint(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	testenv.OnInterrupt(t, "kube-apiserver", func() error { srv.Close(); return nil })
	t.Cleanup(srv.Close)
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	flannel := kubetest.Flannel(t, admin, srv.URL, "..") // deploy/rbac.yml; makes the namespace
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: kubetest.Namespace},
		Data: map[string]string{"net-conf.json": checkAccepted, "cni-conf.json": "{}"}}
	if cm, err = admin.CoreV1().ConfigMaps(kubetest.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checker := configMapReader(ctx, t, admin, flannel, "kube-flannel-cfg")

	checkConfigRun(t, bin, nil, "--kube-subnet-mgr", "--kubeconfig-file="+checker).expect(t, "ConfigMap, accepted", 0,
		"source: ConfigMap kube-flannel/kube-flannel-cfg key net-conf.json", "Kubernetes mode",
		"flannel.7: VXLAN device, VNI 7", "[kube-waits-for-podcidr]", "accepted: weftd would run this config")

	cm.Data["net-conf.json"] = checkRefused
	if _, err := admin.CoreV1().ConfigMaps(kubetest.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkConfigRun(t, bin, []string{"FLANNELD_KUBECONFIG_FILE=" + checker}, "--kube-configmap=kube-flannel/kube-flannel-cfg").
		expect(t, "ConfigMap, refused", 1, `refused: bad backend option: vxlan backend has no option "DirectRuoting"`, "[strict-options]")

	// kube-flannel's own identity may not read ConfigMaps; the checker only that one.
	checkConfigRun(t, bin, nil, "--kube-subnet-mgr", "--kubeconfig-file="+flannel.Kubeconfig).
		expect(t, "deploy/rbac.yml's identity", 2, "forbidden")
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-cfg", Namespace: kubetest.Namespace},
		Data: map[string]string{"net-conf.json": checkAccepted}}
	if _, err := admin.CoreV1().ConfigMaps(kubetest.Namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkConfigRun(t, bin, nil, "--kube-configmap=kube-flannel/other-cfg", "--kubeconfig-file="+checker).
		expect(t, "another ConfigMap", 2, "forbidden")
}

// configMapReader makes a ServiceAccount in kube-flannel's namespace whose only right is
// get on the ConfigMap name (a Role and its RoleBinding), and returns a kubeconfig with
// its token, made from kube-flannel's (flannel).
func configMapReader(ctx context.Context, t *testing.T, admin kubernetes.Interface, flannel kubetest.Identity, name string) string {
	t.Helper()
	const sa = "weft-check-config"
	ns := kubetest.Namespace
	objs := []func() error{
		func() error {
			_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
					ResourceNames: []string{name}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
	expiry := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// kube-flannel's kubeconfig (bench/kubetest) with this account's token instead.
	kc, err := os.ReadFile(flannel.Kubeconfig)
	if err != nil || !bytes.Contains(kc, []byte(flannel.Token)) {
		t.Fatalf("%s: %v, or it holds no token", flannel.Kubeconfig, err)
	}
	kc = bytes.Replace(kc, []byte(flannel.Token), []byte(tr.Status.Token), 1)
	path := filepath.Join(t.TempDir(), "check-config.kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
