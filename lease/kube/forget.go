package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Forgotten is what Forget removed from our node.
type Forgotten struct {
	Node        string
	Annotations []string // keys, sorted
	Conditions  []string // types
}

// Forget removes from our node what weftd alone puts there: every annotation under
// weft's own prefix (weft.weftnet.io/) and the conditions of the given types. With
// withLease it also removes the annotations under --kube-annotation-prefix (the node's
// lease, as flanneld writes it: an uninstall); without, they stay for flanneld (or the
// next weftd) to take over. One patch through nodes/status, which kube-flannel's
// ClusterRole allows; none when the node carries nothing to remove.
func (m *Manager) Forget(ctx context.Context, withLease bool, conditionTypes ...string) (Forgotten, error) {
	name, err := m.nodeNameOf(ctx)
	if err != nil {
		return Forgotten{}, fmt.Errorf("forget our node: %w", err)
	}
	n, err := m.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Forgotten{}, fmt.Errorf("forget our node: read node %s: %w", name, err)
	}
	f := Forgotten{Node: name}
	anns := map[string]any{}
	for k := range n.Annotations {
		if strings.HasPrefix(k, weftAnnPrefix) || withLease && strings.HasPrefix(k, m.prefix) {
			anns[k] = nil // null deletes the key
			f.Annotations = append(f.Annotations, k)
		}
	}
	sort.Strings(f.Annotations)
	var conds []map[string]string
	for _, c := range n.Status.Conditions {
		for _, t := range conditionTypes {
			if string(c.Type) == t {
				// Conditions merge by type; this directive deletes the one of that type.
				conds = append(conds, map[string]string{"type": t, "$patch": "delete"})
				f.Conditions = append(f.Conditions, t)
			}
		}
	}
	if len(anns) == 0 && len(conds) == 0 {
		return f, nil
	}
	body := map[string]any{}
	if len(anns) > 0 {
		body["metadata"] = map[string]any{"annotations": anns}
	}
	if len(conds) > 0 {
		body["status"] = map[string]any{"conditions": conds}
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return Forgotten{}, fmt.Errorf("forget our node: %w", err)
	}
	_, err = m.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return Forgotten{}, fmt.Errorf("forget our node %s: %w", name, err)
	}
	return f, nil
}
