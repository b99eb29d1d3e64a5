package kube

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultAnnotationPrefix is flanneld's --kube-annotation-prefix.
const DefaultAnnotationPrefix = "flannel.alpha.coreos.com"

// ErrBadAnnotationPrefix is wrapped by errors about --kube-annotation-prefix.
var ErrBadAnnotationPrefix = errors.New("bad annotation prefix")

// Annotation names after the prefix, as flanneld reads and writes them.
const (
	annBackendData       = "backend-data"
	annBackendType       = "backend-type"
	annKubeSubnetManager = "kube-subnet-manager"
	annPublicIP          = "public-ip"
	// annPublicIPOverwrite, set on a node by its operator, is published as the node's
	// public-ip in place of the address weftd found (a NAT'd or routed address).
	annPublicIPOverwrite = "public-ip-overwrite"
	// annNodePublicIP, set on a node by its operator, replaces --public-ip.
	annNodePublicIP = "node-public-ip"

	// The IPv6 counterparts, on dual-stack and IPv6-only networks.
	annBackendV6Data       = "backend-v6-data"
	annPublicIPv6          = "public-ipv6"
	annPublicIPv6Overwrite = "public-ipv6-overwrite"
	annNodePublicIPv6      = "node-public-ipv6"
)

// Weft's own annotations, under a prefix of weft's own (flanneld ignores them): a host's
// site, the address hosts of its site dial, whether it is never to be dialed from
// outside its site, and its NAT's outside address and port when it has one. Written
// only for a host with a site.
const (
	weftAnnPrefix = "weft.weftnet.io/"
	annSite       = weftAnnPrefix + "site"
	annSiteIP     = weftAnnPrefix + "site-ip"
	annNAT        = weftAnnPrefix + "nat"
	annOutside    = weftAnnPrefix + "outside"
)

// Weft's annotations that `weftd status` reads: the version of the weftd that runs on
// the node (written whenever weftd publishes its lease), and the site ones above.
const (
	AnnVersion = weftAnnPrefix + "version"
	AnnSite    = annSite
	AnnOutside = annOutside
)

// DefaultSiteLabel is the node label a node's site is read from by default, as Kilo
// reads its locations.
const DefaultSiteLabel = "topology.kubernetes.io/region"

// keyPrefix turns --kube-annotation-prefix into the text every annotation key starts
// with, by flanneld's rule: a prefix without a slash is a domain and gets "/" (so
// "flannel.alpha.coreos.com" gives "flannel.alpha.coreos.com/public-ip"); a prefix
// with one slash that ends in neither "/" nor "-" gets "-" (so "example.com/flannel"
// gives "example.com/flannel-public-ip"). The result must make valid annotation keys
// whose domain part has a dot.
func keyPrefix(p string) (string, error) {
	switch strings.Count(p, "/") {
	case 0:
		p += "/"
	case 1:
	default:
		return "", fmt.Errorf("%w %q: at most one slash", ErrBadAnnotationPrefix, p)
	}
	if !strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "-") {
		p += "-"
	}
	domain, _, _ := strings.Cut(p, "/")
	if !strings.Contains(domain, ".") {
		return "", fmt.Errorf("%w %q: must start with a domain name (like example.com/)", ErrBadAnnotationPrefix, p)
	}
	// The longest key flanneld uses decides whether all of them are valid.
	if errs := validation.IsQualifiedName(p + "public-ipv6-overwrite"); len(errs) > 0 {
		return "", fmt.Errorf("%w %q: keys would be invalid: %s", ErrBadAnnotationPrefix, p, strings.Join(errs, "; "))
	}
	return p, nil
}

// KeyPrefix is what every annotation key starts with for --kube-annotation-prefix p
// (empty: flanneld's default), by flanneld's rule (see keyPrefix).
func KeyPrefix(p string) (string, error) {
	if p == "" {
		p = DefaultAnnotationPrefix
	}
	return keyPrefix(p)
}
