package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// auditEvent is what KubeRequests reads of an audit event (audit.k8s.io/v1 Event).
type auditEvent struct {
	AuditID   string `json:"auditID"`
	Verb      string `json:"verb"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// AuditSize is the audit log's size now: where the next daemon's requests start.
func AuditSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// KubeRequests counts the requests in the audit log from offset on, once each (a
// watch has a ResponseStarted and a ResponseComplete event), by "verb resource"
// ("list nodes", "watch nodes", "patch nodes/status", "get pods").
func KubeRequests(path string, offset int64) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return countRequests(f)
}

func countRequests(r io.Reader) (map[string]int, error) {
	seen := map[string]bool{}
	out := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.AuditID == "" || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		res := "-"
		if ev.ObjectRef != nil {
			res = ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
		}
		out[ev.Verb+" "+res]++
	}
	return out, sc.Err()
}
