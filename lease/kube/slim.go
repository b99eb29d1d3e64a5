package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slim is the node informer's transform: of each Node it keeps what weftd reads (name,
// UID, resource version, the annotations under our prefix, the podCIDRs) and drops the
// rest before it enters the cache: status (images, conditions, addresses), labels,
// managedFields and every other annotation. In a big cluster those are most of a
// Node's bytes, and the informer holds every Node for the daemon's life.
func (m *Manager) slim(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone: its object was slimmed when it came in
	}
	out := &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			DeletionTimestamp: n.DeletionTimestamp},
		Spec: corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
	}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, m.prefix) || strings.HasPrefix(k, weftAnnPrefix) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out, nil
}
