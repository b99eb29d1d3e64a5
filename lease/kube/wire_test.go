package kube

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/weftnet/weft/lease"
)

// protoOf encodes obj as the API server sends it in protobuf.
func protoOf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), protobufType)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	var buf bytes.Buffer
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	if err := enc.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func testDecoder(t testing.TB) runtime.Decoder {
	t.Helper()
	ns := wireSerializer{NegotiatedSerializer: scheme.Codecs.WithoutConversion(), prefix: "flannel.alpha.coreos.com/"}
	info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), protobufType)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	return info.Serializer
}

// TestWireNode: a Node decoded off the wire is what slim keeps of the whole Node,
// alone and in a NodeList, with or without an object to decode into; other kinds go
// to client-go's decoder.
func TestWireNode(t *testing.T) {
	m := &Manager{prefix: "flannel.alpha.coreos.com/"}
	n := fatNode("n1", "198.18.1.0/24")
	n.UID, n.ResourceVersion = "u-1", "42"
	n.Annotations[annSite], n.Annotations[annSiteIP], n.Annotations[annNAT] = "a", "192.0.2.10", "true" // weft's own prefix
	n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "fd00:1::/64")
	del := metav1.NewTime(time.Unix(1700000000, 0))
	n.DeletionTimestamp = &del
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	want, _ := m.slim(n)
	want.(*corev1.Node).TypeMeta = metav1.TypeMeta{}
	dec := testDecoder(t)

	got, gvk, err := dec.Decode(protoOf(t, n), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gvk.Kind != "Node" || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %v %+v\nwant %+v", gvk, got, want)
	}
	into := &corev1.Node{Status: corev1.NodeStatus{Phase: "stale"}}
	if got, _, err := dec.Decode(protoOf(t, n), nil, into); err != nil || got != into || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded into: %+v, %v", got, err)
	}

	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "77", Continue: "next"}, Items: []corev1.Node{*n, *bare}}
	out := &corev1.NodeList{}
	if _, _, err := dec.Decode(protoOf(t, list), nil, out); err != nil {
		t.Fatal(err)
	}
	wantList := &corev1.NodeList{ListMeta: list.ListMeta, Items: []corev1.Node{*want.(*corev1.Node), *bare}}
	if !reflect.DeepEqual(out, wantList) {
		t.Fatalf("list decoded %+v\nwant %+v", out, wantList)
	}

	nd := nodeDecoder{prefix: m.prefix}
	streamed, err := nd.readList(bufio.NewReader(bytes.NewReader(protoOf(t, list))))
	if err != nil || !reflect.DeepEqual(streamed, wantList) {
		t.Fatalf("list streamed %+v, %v\nwant %+v", streamed, err, wantList)
	}
	data := protoOf(t, list)
	for _, cut := range []int{5, len(data) / 2, len(data) - 1} {
		if _, err := nd.readList(bufio.NewReader(bytes.NewReader(data[:cut]))); err == nil {
			t.Fatalf("a list cut at %d of %d bytes streamed", cut, len(data))
		}
	}

	st := &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410}
	got, _, err = dec.Decode(protoOf(t, st), nil, nil)
	if s, ok := got.(*metav1.Status); err != nil || !ok || s.Code != 410 {
		t.Fatalf("a Status decoded as %#v, %v", got, err)
	}
	if _, err := nd.readList(bufio.NewReader(bytes.NewReader(protoOf(t, st)))); err == nil {
		t.Fatal("a Status streamed as a NodeList")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	got, _, err = dec.Decode(protoOf(t, pod), nil, nil)
	if p, ok := got.(*corev1.Pod); err != nil || !ok || p.Spec.NodeName != "n1" {
		t.Fatalf("a Pod decoded as %#v, %v", got, err)
	}
	bookmark := &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	if got, _, err := dec.Decode(protoOf(t, bookmark), nil, nil); err != nil || !reflect.DeepEqual(got, bookmark) {
		t.Fatalf("a watch-list's closing bookmark decoded as %+v, %v", got, err)
	}
	data = protoOf(t, n)
	if _, _, err := dec.Decode(data[:len(data)-3], nil, nil); err == nil {
		t.Fatal("a truncated Node decoded")
	}
}

// BenchmarkWireNode: decoding a kubelet-sized Node whole (client-go) against only
// what weftd keeps.
func BenchmarkWireNode(b *testing.B) {
	n := fatNode("n1", "198.18.1.0/24")
	for i := range 10 {
		n.Status.Images = append(n.Status.Images, n.Status.Images[i])
	}
	data := protoOf(b, n)
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), protobufType)
	for _, c := range []struct {
		name string
		dec  runtime.Decoder
	}{{"whole", info.Serializer}, {"wire", testDecoder(b)}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := c.dec.Decode(data, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fakeNodes lists no Node and hands out the watch w.
type fakeNodes struct{ w *watch.FakeWatcher }

func (f fakeNodes) List(context.Context, metav1.ListOptions) (*corev1.NodeList, error) {
	return &corev1.NodeList{}, nil
}

func (f fakeNodes) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return f.w, nil
}

// TestRelistSpread: the first list goes at once, a re-list (plain or watch-list)
// waits its random part of the spread; a watch-list counts as a list once its
// initial events are over; error events count as watch errors.
func TestRelistSpread(t *testing.T) {
	fw := watch.NewFakeWithChanSize(4, false)
	var waited []time.Duration
	st := &listStats{spread: 40 * time.Millisecond, rand: func(n int64) int64 {
		waited = append(waited, time.Duration(n))
		return n
	}}
	lw := trackedNodes{nodes: fakeNodes{w: fw}, c: &contact{now: time.Now}, st: st, log: zap.NewNop()}
	ctx := context.Background()
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(waited) != 0 {
		t.Fatalf("the first list waited %v", waited)
	}
	t0 := time.Now()
	initial := true
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{SendInitialEvents: &initial})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 40*time.Millisecond || len(waited) != 1 {
		t.Fatalf("a watch-list after a list went after %v (waits %v), want the spread", d, waited)
	}
	if got := st.stats(); got != (lease.Stats{Source: lease.SourceKube, NodeLists: 1}) {
		t.Fatalf("stats %+v before the watch-list's initial events are over", got)
	}
	fw.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	fw.Action(watch.Bookmark, &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	fw.Error(&metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410})
	for range 3 {
		<-w.ResultChan()
	}
	w.Stop()
	if got := st.stats(); got != (lease.Stats{Source: lease.SourceKube, NodeLists: 2, Resyncs: 1, WatchErrors: 1}) {
		t.Fatalf("stats %+v, want 2 lists, 1 re-list, 1 watch error", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lw.ListWithContext(cctx, metav1.ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a re-list on a stopped informer: %v", err)
	}
}
