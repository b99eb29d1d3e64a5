package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/lease"
)

func TestCutMessage(t *testing.T) {
	a255 := strings.Repeat("a", 255)
	for _, tc := range []struct {
		name, in, want string
		limit          int
	}{
		{"empty", "", "", 256},
		{"short", "2 of 40 peers down", "2 of 40 peers down", 256},
		{"exactly the limit", a255 + "b", a255 + "b", 256},
		{"one byte over", a255 + "bc", strings.Repeat("a", 253) + "…", 256},
		{"small limit", "abcdefgh", "abcd…", 7},
		// "é" is 2 bytes: 4 bytes of room leave "aé" and not half an "é".
		{"rune boundary", "aéééé", "aé…", 7},
		{"three-byte rune cut", "ab€€", "ab…", 7},
		{"only the ellipsis fits", "abcd", "…", 3},
		{"multibyte within limit", "ééé", "ééé", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cutMessage(tc.in, tc.limit)
			if got != tc.want {
				t.Errorf("cutMessage(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
			}
			if len(got) > tc.limit || !utf8.ValidString(got) {
				t.Errorf("cutMessage(%q, %d) = %q: %d bytes, valid UTF-8 %v", tc.in, tc.limit, got, len(got), utf8.ValidString(got))
			}
		})
	}
}

func TestNodeConditionTransition(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC))
	now := metav1.NewTime(then.Add(time.Hour))
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: then}
	ours := func(s corev1.ConditionStatus, tr metav1.Time) corev1.NodeCondition {
		return corev1.NodeCondition{Type: "WeftPeersReachable", Status: s, LastTransitionTime: tr}
	}
	for _, tc := range []struct {
		name    string
		current []corev1.NodeCondition
		ok      bool
		want    metav1.Time // the transition time
	}{
		{"none yet", nil, true, now},
		{"only others", []corev1.NodeCondition{ready}, false, now},
		{"same status", []corev1.NodeCondition{ready, ours(corev1.ConditionTrue, then)}, true, then},
		{"status changes", []corev1.NodeCondition{ours(corev1.ConditionTrue, then)}, false, now},
		{"unknown to false", []corev1.NodeCondition{ours(corev1.ConditionUnknown, then)}, false, now},
		{"same status, no time", []corev1.NodeCondition{ours(corev1.ConditionFalse, metav1.Time{})}, false, now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nodeCondition(tc.current, lease.NodeCondition{Type: "WeftPeersReachable", OK: tc.ok, Reason: "R", Message: "m"}, now)
			want := corev1.ConditionFalse
			if tc.ok {
				want = corev1.ConditionTrue
			}
			if c.Status != want || c.Reason != "R" || c.Message != "m" || !c.LastHeartbeatTime.Equal(&now) {
				t.Errorf("condition %+v", c)
			}
			if !c.LastTransitionTime.Equal(&tc.want) {
				t.Errorf("transition %v, want %v", c.LastTransitionTime, tc.want)
			}
		})
	}
}

// TestKubeNodeCondition: with kube-flannel's rights only, SetNodeCondition puts the
// condition on the node with its fields, keeps lastTransitionTime while the status
// stays and moves it when the status changes, cuts a long message, and leaves the
// kubelet's conditions as they were.
func TestKubeNodeCondition(t *testing.T) {
	srv, admin := apiServer(t)
	id := flannel(t, srv, admin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNode(t, admin, "n1", "198.18.1.0/24", nil)
	kubelet := kubeletConditions(t, ctx, admin, "n1")
	m := newManager(t, id, Options{NodeName: "n1"})

	const typ = "WeftPeersReachable"
	set := func(ok bool, reason, msg string) corev1.NodeCondition {
		t.Helper()
		before := time.Now().Truncate(time.Second)
		if err := m.SetNodeCondition(ctx, lease.NodeCondition{Type: typ, OK: ok, Reason: reason, Message: msg}); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		c := condition(t, ctx, admin, "n1", kubelet, typ)
		if hb := c.LastHeartbeatTime.Time; hb.Before(before) || hb.After(after) {
			t.Errorf("lastHeartbeatTime %v, not between %v and %v", hb, before, after)
		}
		return c
	}

	c := set(true, "PeersReachable", "all 2 peers up")
	if c.Status != corev1.ConditionTrue || c.Reason != "PeersReachable" || c.Message != "all 2 peers up" ||
		!c.LastTransitionTime.Equal(&c.LastHeartbeatTime) {
		t.Fatalf("first condition: %+v", c)
	}

	// An hour passes (the times are set back): the same status again keeps the
	// transition time, and writes the new message and heartbeat.
	hourAgo := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	age, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": typ, "lastTransitionTime": hourAgo, "lastHeartbeatTime": hourAgo}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().PatchStatus(ctx, "n1", age); err != nil {
		t.Fatal(err)
	}
	c = set(true, "PeersReachable", "all 3 peers up")
	if c.Status != corev1.ConditionTrue || c.Message != "all 3 peers up" || !c.LastTransitionTime.Equal(&hourAgo) {
		t.Fatalf("same status: %+v, want lastTransitionTime %v", c, hourAgo)
	}

	// The status changes: the transition time moves to now; a long message is cut.
	long := "2 of 40 peers down: " + strings.Repeat("198.18.3.0/24 encap-blocked UDP 8472 — ", 10)
	c = set(false, "PeersDown", long)
	if c.Status != corev1.ConditionFalse || c.Reason != "PeersDown" || !c.LastTransitionTime.Equal(&c.LastHeartbeatTime) {
		t.Fatalf("changed status: %+v, want lastTransitionTime = lastHeartbeatTime", c)
	}
	if len(c.Message) > maxConditionMessage || !strings.HasSuffix(c.Message, "…") ||
		!strings.HasPrefix(long, strings.TrimSuffix(c.Message, "…")) || !utf8.ValidString(c.Message) {
		t.Fatalf("long message stored as %q (%d bytes)", c.Message, len(c.Message))
	}

	// A node that is not there: the API server's NotFound, wrapped.
	gone := newManager(t, id, Options{NodeName: "gone"})
	if err := gone.SetNodeCondition(ctx, lease.NodeCondition{Type: typ, OK: true}); !apierrors.IsNotFound(err) {
		t.Fatalf("condition on a missing node: %v, want NotFound", err)
	}
}

// kubeletConditions gives node name the conditions a kubelet reports, as the admin,
// and returns them as the API server stored them.
func kubeletConditions(t *testing.T, ctx context.Context, admin kubernetes.Interface, name string) []corev1.NodeCondition {
	t.Helper()
	n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	then := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory",
			Message: "kubelet has sufficient memory available", LastHeartbeatTime: then, LastTransitionTime: then},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: then, LastTransitionTime: then},
	}
	n, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Status.Conditions
}

// condition returns the node's condition typ, and fails t when it is missing or when
// the node's other conditions are not exactly others.
func condition(t *testing.T, ctx context.Context, admin kubernetes.Interface, name string, others []corev1.NodeCondition, typ string) corev1.NodeCondition {
	t.Helper()
	n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found []corev1.NodeCondition
	var rest []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if string(c.Type) == typ {
			found = append(found, c)
		} else {
			rest = append(rest, c)
		}
	}
	if !equality.Semantic.DeepEqual(others, rest) {
		t.Errorf("the node's other conditions changed:\nbefore %+v\nnow    %+v", others, rest)
	}
	if len(found) != 1 {
		t.Fatalf("%d conditions %s on node %s: %s", len(found), typ, name, fmt.Sprint(n.Status.Conditions))
	}
	return found[0]
}

// TestKubeForget: with kube-flannel's rights only, Forget removes weft's annotations
// and the named condition from our node and leaves flanneld's annotations, other
// annotations and the kubelet's conditions; a second Forget finds nothing to remove.
func TestKubeForget(t *testing.T) {
	srv, admin := apiServer(t)
	id := flannel(t, srv, admin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kept := map[string]string{
		"flannel.alpha.coreos.com/public-ip":    "192.0.2.10",
		"flannel.alpha.coreos.com/backend-type": "wireguard",
		"example.com/owner":                     "ops",
	}
	anns := map[string]string{annSite: "east", annSiteIP: "192.0.2.10", annOutside: "203.0.113.5:51820"}
	for k, v := range kept {
		anns[k] = v
	}
	createNode(t, admin, "n1", "198.18.1.0/24", anns)
	kubelet := kubeletConditions(t, ctx, admin, "n1")
	m := newManager(t, id, Options{NodeName: "n1"})
	const typ = "WeftPeersReachable"
	if err := m.SetNodeCondition(ctx, lease.NodeCondition{Type: typ, OK: true, Reason: "PeersReachable", Message: "all up"}); err != nil {
		t.Fatal(err)
	}
	condition(t, ctx, admin, "n1", kubelet, typ)

	f, err := m.Forget(ctx, false, typ)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{annOutside, annSite, annSiteIP}
	if f.Node != "n1" || !slices.Equal(f.Annotations, want) || !slices.Equal(f.Conditions, []string{typ}) {
		t.Errorf("Forget removed %+v, want node n1, annotations %v, condition %s", f, want, typ)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(n.Annotations, kept) {
		t.Errorf("annotations after Forget %v, want %v", n.Annotations, kept)
	}
	if !equality.Semantic.DeepEqual(n.Status.Conditions, kubelet) {
		t.Errorf("conditions after Forget %+v, want the kubelet's %+v", n.Status.Conditions, kubelet)
	}
	f, err = m.Forget(ctx, false, typ)
	if err != nil || len(f.Annotations)+len(f.Conditions) != 0 {
		t.Errorf("second Forget: %+v, %v; want nothing removed", f, err)
	}
	// An uninstall takes the lease too: flanneld's annotations go, others stay.
	if f, err = m.Forget(ctx, true, typ); err != nil || len(f.Annotations) != 2 {
		t.Errorf("Forget with the lease: %+v, %v; want flanneld's 2 annotations removed", f, err)
	}
	if n, err = admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"example.com/owner": "ops"}; !maps.Equal(n.Annotations, want) {
		t.Errorf("annotations after an uninstall %v, want %v", n.Annotations, want)
	}
}
