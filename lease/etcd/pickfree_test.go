package etcd

import (
	"net/netip"
	"testing"

	"github.com/weftnet/weft/lease"
)

// TestPickFree: a free subnet in range is found, whatever the range's size (up to
// flanneld's 2^30), never a taken one; none when all are taken.
func TestPickFree(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		take       func(c *lease.Config) map[netip.Prefix]bool
		want       string // the only free subnet, "" for any, "none" for none
	}{
		{"small, one left", `{"Network":"198.18.0.0/16","SubnetLen":24}`, func(c *lease.Config) map[netip.Prefix]bool {
			m := map[netip.Prefix]bool{}
			for i := c.Index(c.SubnetMin); i <= c.Index(c.SubnetMax); i++ {
				if s := c.Subnet(i); s.String() != "198.18.77.0/24" {
					m[s] = true
				}
			}
			return m
		}, "198.18.77.0/24"},
		{"small, full", `{"Network":"198.18.0.0/28"}`, func(c *lease.Config) map[netip.Prefix]bool {
			m := map[netip.Prefix]bool{}
			for i := c.Index(c.SubnetMin); i <= c.Index(c.SubnetMax); i++ {
				m[c.Subnet(i)] = true
			}
			return m
		}, "none"},
		{"2^30, some taken", `{"Network":"0.0.0.0/0","SubnetLen":30}`, func(c *lease.Config) map[netip.Prefix]bool {
			m := map[netip.Prefix]bool{}
			for i := 1; i < 5000; i++ {
				m[c.Subnet(i)] = true
			}
			return m
		}, ""},
		{"16 between Min and Max, all but one taken", `{"Network":"10.0.0.0/8","SubnetLen":28,"SubnetMin":"10.0.0.16","SubnetMax":"10.0.1.0"}`,
			func(c *lease.Config) map[netip.Prefix]bool {
				return map[netip.Prefix]bool{c.Subnet(1): true, c.Subnet(2): true, c.Subnet(3): true, c.Subnet(4): true,
					c.Subnet(5): true, c.Subnet(6): true, c.Subnet(7): true, c.Subnet(8): true, c.Subnet(9): true,
					c.Subnet(10): true, c.Subnet(11): true, c.Subnet(12): true, c.Subnet(13): true, c.Subnet(14): true,
					c.Subnet(15): true}
			}, "10.0.1.0/28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := lease.ParseConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			taken := tc.take(c)
			for range 20 {
				s, ok := pickFree(c, taken)
				switch {
				case tc.want == "none" && ok:
					t.Fatalf("picked %v in a full range", s)
				case tc.want == "none":
				case !ok:
					t.Fatal("nothing picked")
				case taken[s] || !c.InRange(s):
					t.Fatalf("picked %v: taken %v, in range %v", s, taken[s], c.InRange(s))
				case tc.want != "" && s.String() != tc.want:
					t.Fatalf("picked %v, want %s", s, tc.want)
				}
			}
		})
	}
}

// TestPickFreeLargeScan: in a range beyond 2^16 where random probes keep hitting
// taken subnets, the scan still finds the few free ones.
func TestPickFreeLargeScan(t *testing.T) {
	c, err := lease.ParseConfig([]byte(`{"Network":"10.0.0.0/8","SubnetLen":30,"SubnetMin":"10.0.0.4","SubnetMax":"10.8.0.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := c.Index(c.SubnetMin), c.Index(c.SubnetMax)
	taken := map[netip.Prefix]bool{}
	for i := lo; i <= hi; i++ {
		if i != lo+12345 {
			taken[c.Subnet(i)] = true
		}
	}
	if hi-lo+1 <= 1<<16 {
		t.Fatalf("range of %d subnets: not the large case", hi-lo+1)
	}
	if s, ok := pickFree(c, taken); !ok || s != c.Subnet(lo+12345) {
		t.Fatalf("picked %v %v, want %v", s, ok, c.Subnet(lo+12345))
	}
}
