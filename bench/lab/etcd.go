package lab

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// etcdHTTP talks to the lab's etcd over HTTP (the v3 JSON gateway and the v2 keys
// API) from inside the router namespace: the root namespace has no route to it.
// With Spec.EtcdTLS it shows the lab's client certificate.
func (l *Lab) etcdHTTP() (*http.Client, error) {
	var tc *tls.Config
	if l.tls != nil {
		var err error
		if tc, err = l.tls.Config(); err != nil {
			return nil, err
		}
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: tc,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				err := l.router.Do(func() error {
					var err error
					c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
					return err
				})
				return c, err
			},
			DisableKeepAlives: true,
		},
	}, nil
}

// etcdDo sends one request to the lab's etcd: to the first of its endpoints that
// answers (a cluster's member may be down). While a cluster elects a leader, etcd
// answers writes with 503: callers that kill members retry.
func (l *Lab) etcdDo(ctx context.Context, method, path string, body io.Reader, ctype string, out any) error {
	if len(l.endpoints) == 0 {
		return ErrNoEtcd
	}
	hc, err := l.etcdHTTP()
	if err != nil {
		return err
	}
	var payload []byte
	if body != nil {
		if payload, err = io.ReadAll(body); err != nil {
			return fmt.Errorf("etcd %s: %w", path, err)
		}
	}
	var resp *http.Response
	var last error
	for _, ep := range l.endpoints {
		req, err := http.NewRequestWithContext(ctx, method, ep+path, bytes.NewReader(payload))
		if err != nil {
			return fmt.Errorf("etcd %s: %w", path, err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if resp, last = hc.Do(req); last == nil {
			break
		}
		if len(l.endpoints) == 1 || ctx.Err() != nil {
			return fmt.Errorf("etcd %s %s: %w", method, path, last)
		}
		l.log.Debug("etcd member does not answer", zap.String("endpoint", ep), errField(last))
	}
	if last != nil {
		return fmt.Errorf("etcd %s %s: %w: %w", method, path, ErrEtcdUnreachable, last)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("etcd %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("etcd %s %s: %w", method, path, &StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(data))})
	}
	if out != nil && resp.StatusCode != http.StatusNotFound {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("etcd %s %s: %w", method, path, err)
		}
	}
	return nil
}

// ErrEtcdUnreachable is returned when no member of the lab's etcd answers.
var ErrEtcdUnreachable = errors.New("no etcd member answers")

// StatusError is an HTTP error answer of etcd.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string { return fmt.Sprintf("status %d: %s", e.Code, e.Body) }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// prefixEnd is the etcd range end that covers every key starting with p.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// Put writes key=value through both the v3 and the v2 API, so daemons on either
// (flanneld's --etcd-api or older flanneld) read the same thing.
func (l *Lab) Put(ctx context.Context, key, value string) error {
	body, _ := json.Marshal(map[string]string{"key": b64(key), "value": b64(value)})
	if err := l.etcdDo(ctx, http.MethodPost, "/v3/kv/put", bytes.NewReader(body), "application/json", nil); err != nil {
		return err
	}
	form := url.Values{"value": {value}}.Encode()
	return l.etcdDo(ctx, http.MethodPut, "/v2/keys"+key, strings.NewReader(form), "application/x-www-form-urlencoded", nil)
}

// Delete removes key from both APIs; a missing key is no error.
func (l *Lab) Delete(ctx context.Context, key string) error {
	body, _ := json.Marshal(map[string]string{"key": b64(key)})
	if err := l.etcdDo(ctx, http.MethodPost, "/v3/kv/deleterange", bytes.NewReader(body), "application/json", nil); err != nil {
		return err
	}
	return l.etcdDo(ctx, http.MethodDelete, "/v2/keys"+key, nil, "", nil)
}

// DeletePrefix removes every key under prefix from both APIs.
func (l *Lab) DeletePrefix(ctx context.Context, prefix string) error {
	body, _ := json.Marshal(map[string]string{"key": b64(prefix), "range_end": b64(prefixEnd(prefix))})
	if err := l.etcdDo(ctx, http.MethodPost, "/v3/kv/deleterange", bytes.NewReader(body), "application/json", nil); err != nil {
		return err
	}
	return l.etcdDo(ctx, http.MethodDelete, "/v2/keys"+strings.TrimSuffix(prefix, "/")+"?recursive=true", nil, "", nil)
}

// NetworkConfig is the JSON network config the lab writes for backend type bt.
func NetworkConfig(bt string) string { return NetworkConfigWith(bt, "") }

// NetworkConfigWith is NetworkConfig with more members of the Backend object: opts
// is their JSON text without braces, e.g. `"BusyPoll":"50ms"`.
func NetworkConfigWith(bt, opts string) string {
	if opts != "" {
		opts = "," + opts
	}
	return fmt.Sprintf(`{"Network":%q,"SubnetLen":24,"Backend":{"Type":%q%s}}`, Overlay.String(), bt, opts)
}

// SetBackend writes prefix/config for backend type bt and removes the leases under
// prefix/subnets/ (they may be of another type).
func (l *Lab) SetBackend(ctx context.Context, prefix, bt string) error {
	return l.SetBackendWith(ctx, prefix, bt, "")
}

// SetBackendWith is SetBackend with backend options (see NetworkConfigWith).
func (l *Lab) SetBackendWith(ctx context.Context, prefix, bt, opts string) error {
	return l.SetConfig(ctx, prefix, NetworkConfigWith(bt, opts))
}

// SetConfig writes config (a network config's JSON) as prefix/config and removes the
// leases under prefix/subnets/ (they may be of another backend or family).
func (l *Lab) SetConfig(ctx context.Context, prefix, config string) error {
	if !json.Valid([]byte(config)) {
		return fmt.Errorf("network config %s: not JSON", config)
	}
	if prefix == "" {
		prefix = lease.DefaultPrefix
	}
	if err := l.DeletePrefix(ctx, prefix+"/subnets/"); err != nil {
		return err
	}
	if err := l.Put(ctx, prefix+"/config", config); err != nil {
		return err
	}
	l.log.Debug("network config", zap.String("prefix", prefix), zap.String("config", config))
	return nil
}

// Leases lists the leases under prefix/subnets/ as subnet key -> JSON value, from
// the v3 API and, for keys only it holds, the v2 API.
func (l *Lab) Leases(ctx context.Context, prefix string) (map[string]string, error) {
	if prefix == "" {
		prefix = lease.DefaultPrefix
	}
	dir := prefix + "/subnets/"
	body, _ := json.Marshal(map[string]string{"key": b64(dir), "range_end": b64(prefixEnd(dir))})
	var r3 struct {
		Kvs []struct{ Key, Value string } `json:"kvs"`
	}
	if err := l.etcdDo(ctx, http.MethodPost, "/v3/kv/range", bytes.NewReader(body), "application/json", &r3); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range r3.Kvs {
		k, _ := base64.StdEncoding.DecodeString(kv.Key)
		v, _ := base64.StdEncoding.DecodeString(kv.Value)
		out[strings.TrimPrefix(string(k), dir)] = string(v)
	}
	var r2 struct {
		Node struct {
			Nodes []struct{ Key, Value string } `json:"nodes"`
		} `json:"node"`
	}
	if err := l.etcdDo(ctx, http.MethodGet, "/v2/keys"+strings.TrimSuffix(dir, "/"), nil, "", &r2); err != nil {
		return nil, err
	}
	for _, n := range r2.Node.Nodes {
		k := n.Key[strings.LastIndex(n.Key, "/")+1:]
		if _, ok := out[k]; !ok {
			out[k] = n.Value
		}
	}
	return out, nil
}

// SortedKeys returns m's keys in order.
func SortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func errField(err error) zap.Field { return zap.Error(err) }
