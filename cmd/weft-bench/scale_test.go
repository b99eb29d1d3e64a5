package main

import (
	"errors"
	"slices"
	"testing"
)

func TestScaleSizes(t *testing.T) {
	for _, tc := range []struct {
		hosts int
		sizes string
		want  []int
		err   bool
	}{
		{5000, "", []int{100, 500, 1000, 2000, 5000}, false},
		{500, "", []int{100, 500}, false},
		{50, "", []int{50}, false},
		{0, "1000, 100", []int{100, 1000}, false},
		{0, "100,x", nil, true},
		{0, "0", nil, true},
		{9000, "", nil, true},
	} {
		got, err := scaleSizes(tc.hosts, tc.sizes)
		if tc.err {
			if !errors.Is(err, errUsage) {
				t.Errorf("scaleSizes(%d, %q) = %v, %v; want a usage error", tc.hosts, tc.sizes, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("scaleSizes(%d, %q) = %v, %v; want %v", tc.hosts, tc.sizes, got, err, tc.want)
		}
	}
}
