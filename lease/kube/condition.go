package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/lease"
)

// maxConditionMessage is the most bytes of a condition's message weftd writes: enough
// for a sentence about a few peers, short enough for `kubectl describe node`.
const maxConditionMessage = 256

// errNoConditionType is returned by SetNodeCondition for a condition without a type.
var errNoConditionType = errors.New("node condition without a type")

// SetNodeCondition sets c on our node's status and leaves the node's other conditions
// (the kubelet's Ready and the rest) as they are. lastHeartbeatTime is now;
// lastTransitionTime is now only when c's status differs from the one the node carries,
// else the node's. The informer's cache holds no conditions (slim drops them), so the
// node is read with a GET: the daemon calls this when its summary changes, not often.
// The patch is a strategic merge on status.conditions (merged by type) through
// nodes/status, which kube-flannel's ClusterRole allows.
func (m *Manager) SetNodeCondition(ctx context.Context, c lease.NodeCondition) error {
	if c.Type == "" {
		return errNoConditionType
	}
	name, err := m.nodeNameOf(ctx)
	if err != nil {
		return fmt.Errorf("set node condition %s: %w", c.Type, err)
	}
	n, err := m.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("set node condition %s: read node %s: %w", c.Type, name, err)
	}
	cond := nodeCondition(n.Status.Conditions, c, metav1.Now())
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return fmt.Errorf("set node condition %s: %w", c.Type, err)
	}
	if _, err := m.client.CoreV1().Nodes().PatchStatus(ctx, name, patch); err != nil {
		return fmt.Errorf("set node condition %s on node %s: %w", c.Type, name, err)
	}
	return nil
}

// nodeCondition is c as the node condition to write at now, given the node's current
// conditions: the transition time is kept while the status stays the same.
func nodeCondition(current []corev1.NodeCondition, c lease.NodeCondition, now metav1.Time) corev1.NodeCondition {
	status := corev1.ConditionFalse
	if c.OK {
		status = corev1.ConditionTrue
	}
	out := corev1.NodeCondition{
		Type:               corev1.NodeConditionType(c.Type),
		Status:             status,
		Reason:             c.Reason,
		Message:            cutMessage(c.Message, maxConditionMessage),
		LastHeartbeatTime:  now,
		LastTransitionTime: now,
	}
	for _, old := range current {
		if old.Type == out.Type && old.Status == status && !old.LastTransitionTime.IsZero() {
			out.LastTransitionTime = old.LastTransitionTime
		}
	}
	return out
}

// cutMessage returns s when it has at most limit bytes, else its start cut on a rune
// boundary and followed by "…", limit bytes at most in all (limit is at least the 3
// bytes of "…").
func cutMessage(s string, limit int) string {
	const ellipsis = "…"
	if len(s) <= limit {
		return s
	}
	end := max(limit-len(ellipsis), 0)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + ellipsis
}

// Site is our node's site: the value of its label Options.SiteLabel ("" without one).
func (m *Manager) Site(ctx context.Context) (string, error) {
	if m.opts.SiteLabel == "" {
		return "", nil
	}
	name, err := m.nodeNameOf(ctx)
	if err != nil {
		return "", err
	}
	n, err := m.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read node %s for its site label %s: %w", name, m.opts.SiteLabel, err)
	}
	return n.Labels[m.opts.SiteLabel], nil
}
