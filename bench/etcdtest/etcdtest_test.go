package etcdtest

import (
	"context"
	"net/http"
	"testing"
)

func TestStartServesHealth(t *testing.T) {
	s := Start(t)
	req, _ := http.NewRequestWithContext(context.Background(), "GET", s.Endpoint()+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health status %d", resp.StatusCode)
	}
}
