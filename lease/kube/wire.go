package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// The node list and watch read Nodes off the wire in protobuf and decode only what
// weftd keeps (slim.go): name, UID, resource version, deletion timestamp, the
// annotations under our prefix and weft's own, and the podCIDRs. Status (images, conditions,
// addresses: most of a Node's bytes, and what kubelets rewrite) is skipped without
// being decoded, so the garbage a sync leaves behind, and the heap the collector
// lets grow over it, follow the number of Nodes rather than their size.

const protobufType = "application/vnd.kubernetes.protobuf"

// protobufMagic starts every object Kubernetes encodes in protobuf ("k8s\x00").
var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

var errWire = errors.New("malformed protobuf")

// wireNodes lists and watches Nodes through a REST client whose protobuf decoder is
// a nodeDecoder.
type wireNodes struct {
	rc  rest.Interface
	dec nodeDecoder
}

// newWireNodes returns Node list and watch calls over cfg (a copy is changed) that
// decode Nodes with a nodeDecoder keeping the annotations under prefix.
func newWireNodes(cfg *rest.Config, prefix string) (wireNodes, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.ContentType = protobufType
	c.AcceptContentTypes = protobufType + ",application/json"
	c.NegotiatedSerializer = wireSerializer{NegotiatedSerializer: scheme.Codecs.WithoutConversion(), prefix: prefix}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return wireNodes{}, err
	}
	return wireNodes{rc: rc, dec: nodeDecoder{prefix: prefix}}, nil
}

func timeout(o metav1.ListOptions) time.Duration {
	if o.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*o.TimeoutSeconds) * time.Second
}

// List reads the NodeList as it arrives, one Node at a time, instead of reading the
// whole response first: a list from the API server's watch cache (resourceVersion
// "0", what the reflector asks first) comes in one piece whatever its limit.
func (w wireNodes) List(ctx context.Context, o metav1.ListOptions) (*corev1.NodeList, error) {
	body, err := w.rc.Get().Resource("nodes").VersionedParams(&o, scheme.ParameterCodec).
		Timeout(timeout(o)).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	r := bufio.NewReaderSize(body, 32<<10)
	if magic, err := r.Peek(len(protobufMagic)); err != nil || !bytes.Equal(magic, protobufMagic) {
		// Not protobuf (a server that does not speak it): decode it whole; the
		// informer's transform slims it.
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		out := &corev1.NodeList{}
		if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, out); err != nil {
			return nil, fmt.Errorf("decode NodeList: %w", err)
		}
		return out, nil
	}
	out, err := w.dec.readList(r)
	if err != nil {
		return nil, fmt.Errorf("decode NodeList: %w", err)
	}
	return out, nil
}

// readList decodes a NodeList in protobuf (magic, then runtime.Unknown) from r.
func (d nodeDecoder) readList(r *bufio.Reader) (*corev1.NodeList, error) {
	if _, err := r.Discard(len(protobufMagic)); err != nil {
		return nil, err
	}
	out := &corev1.NodeList{}
	var buf []byte
	sawList := false
	err := readFields(r, -1, func(num, typ uint64, n int64) error {
		switch {
		case num == 1 && typ == 2: // typeMeta
			b, err := readN(r, n, &buf)
			if err != nil {
				return err
			}
			apiVersion, kind, err := typeMeta(b)
			if err != nil {
				return err
			}
			if apiVersion != "v1" || kind != "NodeList" {
				return fmt.Errorf("%w: a %s %s, not a v1 NodeList", errWire, apiVersion, kind)
			}
			sawList = true
			return nil
		case num == 2 && typ == 2 && sawList: // raw: the NodeList
			return readFields(r, n, func(num, typ uint64, n int64) error {
				b, err := readN(r, n, &buf)
				switch {
				case err != nil:
					return err
				case num == 1 && typ == 2:
					return out.ListMeta.Unmarshal(b)
				case num == 2 && typ == 2:
					out.Items = append(out.Items, corev1.Node{})
					return d.node(b, &out.Items[len(out.Items)-1])
				}
				return nil
			})
		}
		_, err := readN(r, n, &buf)
		return err
	})
	if err == nil && !sawList {
		err = fmt.Errorf("%w: no NodeList", errWire)
	}
	return out, err
}

// readFields reads the fields of a protobuf message of size bytes from r (-1: up to
// EOF) and calls f with each field's number, wire type and the size of its value,
// which f must read. A varint's size is 0: readFields reads it.
func readFields(r *bufio.Reader, size int64, f func(num, typ uint64, n int64) error) error {
	cr := &countingReader{r: r}
	for size < 0 || cr.n < size {
		tag, err := binary.ReadUvarint(cr)
		if err == io.EOF && size < 0 { // the end of the top message
			return nil
		}
		if err != nil {
			return err
		}
		num, typ := tag>>3, tag&7
		var n int64
		switch typ {
		case 0:
			if _, err := binary.ReadUvarint(cr); err != nil {
				return err
			}
		case 1:
			n = 8
		case 5:
			n = 4
		case 2:
			l, err := binary.ReadUvarint(cr)
			if err != nil {
				return err
			}
			if size >= 0 && l > uint64(size-cr.n) || l > 1<<30 {
				return errWire
			}
			n = int64(l)
		default:
			return errWire
		}
		if err := f(num, typ, n); err != nil {
			return err
		}
		cr.n += n
	}
	if cr.n != size {
		return errWire
	}
	return nil
}

// countingReader counts the bytes read through it (readFields adds those its callback
// read).
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// readN reads n bytes from r into *buf (grown as needed, reused) and returns them.
func readN(r *bufio.Reader, n int64, buf *[]byte) ([]byte, error) {
	if int64(cap(*buf)) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

func (w wireNodes) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return w.rc.Get().Resource("nodes").VersionedParams(&o, scheme.ParameterCodec).
		Timeout(timeout(o)).Watch(ctx)
}

// wireSerializer is client-go's serializer with the protobuf decoder wrapped in a
// nodeDecoder.
type wireSerializer struct {
	runtime.NegotiatedSerializer
	prefix string
}

func (s wireSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := append([]runtime.SerializerInfo(nil), s.NegotiatedSerializer.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType == protobufType {
			infos[i].Serializer = nodeDecoder{Serializer: infos[i].Serializer, prefix: s.prefix}
		}
	}
	return infos
}

// nodeDecoder decodes v1 Nodes and NodeLists in protobuf keeping only what weftd
// reads; everything else goes to the wrapped serializer.
type nodeDecoder struct {
	runtime.Serializer
	prefix string
}

var nodeGVK = corev1.SchemeGroupVersion.WithKind("Node")

func (d nodeDecoder) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if !bytes.HasPrefix(data, protobufMagic) {
		return d.Serializer.Decode(data, gvk, into)
	}
	apiVersion, kind, raw, err := unknown(data[len(protobufMagic):])
	if err != nil || apiVersion != "v1" {
		return d.Serializer.Decode(data, gvk, into)
	}
	switch kind {
	case "Node":
		n, ok := into.(*corev1.Node)
		if into == nil {
			n, ok = &corev1.Node{}, true
		}
		if !ok {
			break
		}
		*n = corev1.Node{}
		if err := d.node(raw, n); err != nil {
			return nil, nil, fmt.Errorf("decode Node: %w", err)
		}
		return n, &nodeGVK, nil
	case "NodeList":
		l, ok := into.(*corev1.NodeList)
		if into == nil {
			l, ok = &corev1.NodeList{}, true
		}
		if !ok {
			break
		}
		*l = corev1.NodeList{}
		if err := d.nodeList(raw, l); err != nil {
			return nil, nil, fmt.Errorf("decode NodeList: %w", err)
		}
		listGVK := corev1.SchemeGroupVersion.WithKind("NodeList")
		return l, &listGVK, nil
	}
	return d.Serializer.Decode(data, gvk, into)
}

// fields calls f for each field of the protobuf message b: for length-delimited
// fields v is the payload, for the others the encoded value.
func fields(b []byte, f func(num uint64, typ uint64, v []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return errWire
		}
		b = b[n:]
		num, typ := tag>>3, tag&7
		var v []byte
		switch typ {
		case 0: // varint
			_, n = binary.Uvarint(b)
			if n <= 0 {
				return errWire
			}
			v, b = b[:n], b[n:]
		case 1: // fixed64
			if len(b) < 8 {
				return errWire
			}
			v, b = b[:8], b[8:]
		case 5: // fixed32
			if len(b) < 4 {
				return errWire
			}
			v, b = b[:4], b[4:]
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errWire
			}
			v, b = b[n:n+int(l)], b[n+int(l):]
		default: // groups: not in Kubernetes' messages
			return errWire
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// unknown reads the envelope of a protobuf object (runtime.Unknown): its TypeMeta and
// raw message, without copying.
func unknown(b []byte) (apiVersion, kind string, raw []byte, err error) {
	err = fields(b, func(num, typ uint64, v []byte) error {
		switch {
		case num == 1 && typ == 2:
			var err error
			apiVersion, kind, err = typeMeta(v)
			return err
		case num == 2 && typ == 2: // raw
			raw = v
		case num == 3 && typ == 2 && len(v) > 0: // contentEncoding: none is ever set
			return errWire
		}
		return nil
	})
	return apiVersion, kind, raw, err
}

// typeMeta reads a runtime.TypeMeta.
func typeMeta(b []byte) (apiVersion, kind string, err error) {
	err = fields(b, func(num, typ uint64, v []byte) error {
		switch {
		case num == 1 && typ == 2:
			apiVersion = string(v)
		case num == 2 && typ == 2:
			kind = string(v)
		}
		return nil
	})
	return apiVersion, kind, err
}

func (d nodeDecoder) nodeList(b []byte, l *corev1.NodeList) error {
	return fields(b, func(num, typ uint64, v []byte) error {
		switch {
		case num == 1 && typ == 2:
			return l.ListMeta.Unmarshal(v)
		case num == 2 && typ == 2:
			l.Items = append(l.Items, corev1.Node{})
			return d.node(v, &l.Items[len(l.Items)-1])
		}
		return nil
	})
}

// node decodes a v1.Node's metadata and spec as slim keeps them; status is skipped.
func (d nodeDecoder) node(b []byte, n *corev1.Node) error {
	return fields(b, func(num, typ uint64, v []byte) error {
		switch {
		case num == 1 && typ == 2:
			return d.meta(v, &n.ObjectMeta)
		case num == 2 && typ == 2:
			return spec(v, &n.Spec)
		}
		return nil
	})
}

func (d nodeDecoder) meta(b []byte, m *metav1.ObjectMeta) error {
	return fields(b, func(num, typ uint64, v []byte) error {
		if typ != 2 {
			return nil
		}
		switch num {
		case 1:
			m.Name = string(v)
		case 5:
			m.UID = types.UID(v)
		case 6:
			m.ResourceVersion = string(v)
		case 9:
			m.DeletionTimestamp = &metav1.Time{}
			return m.DeletionTimestamp.Unmarshal(v)
		case 12: // annotations: map entries of key (1) and value (2)
			var key, value []byte
			if err := fields(v, func(num, typ uint64, v []byte) error {
				switch {
				case num == 1 && typ == 2:
					key = v
				case num == 2 && typ == 2:
					value = v
				}
				return nil
			}); err != nil {
				return err
			}
			// A watch-list's bookmark marks the end of its initial events with an
			// annotation of its own, which the reflector must see.
			if !bytes.HasPrefix(key, []byte(d.prefix)) && !bytes.HasPrefix(key, []byte(weftAnnPrefix)) && string(key) != metav1.InitialEventsAnnotationKey {
				return nil
			}
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[string(key)] = string(value)
		}
		return nil
	})
}

func spec(b []byte, s *corev1.NodeSpec) error {
	return fields(b, func(num, typ uint64, v []byte) error {
		switch {
		case num == 1 && typ == 2:
			s.PodCIDR = string(v)
		case num == 7 && typ == 2:
			s.PodCIDRs = append(s.PodCIDRs, string(v))
		}
		return nil
	})
}
