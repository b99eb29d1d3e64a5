// Package kubetest gives tests weftd's least-privileged Kubernetes identity on a real
// API server: kube-flannel's namespace, and the ServiceAccount, ClusterRole and
// binding of deploy/rbac.yml, with a kubeconfig holding a token of that ServiceAccount
// (from the TokenRequest API). Tests never run weftd as cluster admin.
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
)

// Where kube-flannel.yml puts flannel's identity.
const (
	Namespace      = "kube-flannel"
	ServiceAccount = "flannel"
	// User is the name the API server knows the ServiceAccount by.
	User = "system:serviceaccount:" + Namespace + ":" + ServiceAccount
)

// RBACFile is deploy/rbac.yml under the repository root.
func RBACFile(repoRoot string) string { return filepath.Join(repoRoot, "deploy", "rbac.yml") }

// Objects are the objects of deploy/rbac.yml.
type Objects struct {
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	ServiceAccount     *corev1.ServiceAccount
}

// errUnexpectedKind is returned for a document of a kind the RBAC file should not hold.
var errUnexpectedKind = errors.New("unexpected kind")

// ParseRBAC reads the ClusterRole, ClusterRoleBinding and ServiceAccount of a
// (multi-document) YAML manifest; other kinds are an error unless skipOthers.
func ParseRBAC(r io.Reader, skipOthers bool) (Objects, error) {
	var o Objects
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return o, err
		}
		if doc == nil {
			continue
		}
		var into any
		switch doc["kind"] {
		case "ClusterRole":
			o.ClusterRole = &rbacv1.ClusterRole{}
			into = o.ClusterRole
		case "ClusterRoleBinding":
			o.ClusterRoleBinding = &rbacv1.ClusterRoleBinding{}
			into = o.ClusterRoleBinding
		case "ServiceAccount":
			o.ServiceAccount = &corev1.ServiceAccount{}
			into = o.ServiceAccount
		default:
			if skipOthers {
				continue
			}
			return o, fmt.Errorf("%w %v", errUnexpectedKind, doc["kind"])
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(doc, into); err != nil {
			return o, fmt.Errorf("%v: %w", doc["kind"], err)
		}
	}
	if o.ClusterRole == nil || o.ClusterRoleBinding == nil || o.ServiceAccount == nil {
		return o, errors.New("want a ClusterRole, a ClusterRoleBinding and a ServiceAccount")
	}
	return o, nil
}

// Identity is weftd's identity on a test API server.
type Identity struct {
	Kubeconfig string // file with the server URL and the ServiceAccount's token
	Token      string
}

// Flannel applies deploy/rbac.yml (under repoRoot) with the admin client, and returns
// a kubeconfig for the ServiceAccount on the server at url. Everything lives in the API
// server the test made (and removes).
func Flannel(t testing.TB, admin kubernetes.Interface, url, repoRoot string) Identity {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := NewIdentity(ctx, admin, url, repoRoot, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// NewIdentity is Flannel for a caller without a testing.TB (weft-bench): the
// kubeconfig is written into dir.
func NewIdentity(ctx context.Context, admin kubernetes.Interface, url, repoRoot, dir string) (Identity, error) {
	data, err := os.ReadFile(RBACFile(repoRoot))
	if err != nil {
		return Identity{}, err
	}
	objs, err := ParseRBAC(bytes.NewReader(data), false)
	if err != nil {
		return Identity{}, fmt.Errorf("%s: %w", RBACFile(repoRoot), err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return Identity{}, err
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, objs.ClusterRole, metav1.CreateOptions{}); err != nil {
		return Identity{}, err
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, objs.ClusterRoleBinding, metav1.CreateOptions{}); err != nil {
		return Identity{}, err
	}
	sa, err := admin.CoreV1().ServiceAccounts(Namespace).Create(ctx, objs.ServiceAccount, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, err
	}
	if sa.Namespace != Namespace || sa.Name != ServiceAccount {
		return Identity{}, fmt.Errorf("deploy/rbac.yml: ServiceAccount %s/%s, want %s/%s", sa.Namespace, sa.Name, Namespace, ServiceAccount)
	}
	expiry := int64(6 * 3600)
	tr, err := admin.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, ServiceAccount,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, err
	}
	id := Identity{Token: tr.Status.Token, Kubeconfig: filepath.Join(dir, "flannel.kubeconfig")}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: flannel
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: flannel
current-context: test
`, url, id.Token)
	if err := os.WriteFile(id.Kubeconfig, []byte(kc), 0o600); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// Pod creates the object of weftd's pod on node, in kube-flannel's namespace under its
// ServiceAccount, as the DaemonSet controller and scheduler would; no kubelet runs it.
// weftd finds its node from it (POD_NAME, POD_NAMESPACE).
func Pod(t testing.TB, admin kubernetes.Interface, name, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreatePod(ctx, admin, name, node); err != nil {
		t.Fatal(err)
	}
}

// CreatePod is Pod for a caller without a testing.TB.
func CreatePod(ctx context.Context, admin kubernetes.Interface, name, node string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"app": "flannel"}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: ServiceAccount,
			HostNetwork:        true,
			Containers:         []corev1.Container{{Name: "kube-flannel", Image: "weft.invalid/weftd:test"}},
		},
	}
	_, err := admin.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}
