package kube

import (
	"errors"
	"testing"
)

// TestKeyPrefix follows flanneld's rule for --kube-annotation-prefix.
func TestKeyPrefix(t *testing.T) {
	for _, tt := range []struct {
		in, want string // want "" for an error
	}{
		{"flannel.alpha.coreos.com", "flannel.alpha.coreos.com/"},
		{"example.com/", "example.com/"},
		{"example.com/flannel", "example.com/flannel-"},
		{"example.com/flannel-", "example.com/flannel-"},
		{"example.com/my_net", "example.com/my_net-"},
		{"a.b/c/d", ""},     // two slashes
		{"flannel", ""},     // no domain
		{"Example.com", ""}, // not a DNS name
		{"example.com/x y", ""},
		{"", ""},
	} {
		got, err := keyPrefix(tt.in)
		if tt.want == "" {
			if !errors.Is(err, ErrBadAnnotationPrefix) {
				t.Errorf("keyPrefix(%q) = %q, %v; want ErrBadAnnotationPrefix", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("keyPrefix(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func FuzzKeyPrefix(f *testing.F) {
	for _, s := range []string{"flannel.alpha.coreos.com", "example.com/flannel", "a/b/c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := keyPrefix(s)
		if err != nil {
			return
		}
		if n, err2 := keyPrefix(p); err2 != nil || n != p {
			t.Fatalf("keyPrefix(%q) = %q, but keyPrefix of that is %q, %v", s, p, n, err2)
		}
	})
}
