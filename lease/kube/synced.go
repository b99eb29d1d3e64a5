package kube

import "context"

// WaitSynced finds our node and waits until the node informer's cache has synced
// (or ctx ends), as flanneld waits for its node controller before it goes on. Acquire
// and Watch wait for the same; WaitSynced lets the caller bound that wait alone.
func (m *Manager) WaitSynced(ctx context.Context) error {
	return m.start(ctx)
}
