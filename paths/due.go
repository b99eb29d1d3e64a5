package paths

import "container/heap"

// dueQueue orders peers by when their next round is due (a min-heap on next), so a
// tick looks only at the peers that are due: O(log n) per round, not a scan of
// thousands of peers fifty times a second. Forgotten peers stay in it until popped.
type dueQueue []*peer

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(*peer)) }
func (q *dueQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return p
}

func (q *dueQueue) push(p *peer) { heap.Push(q, p) }
func (q *dueQueue) pop() *peer   { return heap.Pop(q).(*peer) }

// peek is the peer due first (nil: none).
func (q dueQueue) peek() *peer {
	if len(q) == 0 {
		return nil
	}
	return q[0]
}
