// Package extension holds flannel's extension backend: no data path of its own, only
// the commands the network config names, run as flanneld runs them.
package extension

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// extensionType is the BackendType of the extension backend's leases. Peers' leases
// are compared with it exactly, as flanneld compares them.
const extensionType = "extension"

// extensionKillDelay is how long a command may hold its output open once ctx has
// ended and it has been killed (a child it left behind) before weftd stops waiting.
const extensionKillDelay = 5 * time.Second

// extensionOptions are the options of flanneld's extension backend (v0.28.10 has no
// IPv6 forms of them).
type extensionOptions struct {
	PreStartupCommand   string
	PostStartupCommand  string
	SubnetAddCommand    string
	SubnetRemoveCommand string
}

// backend is flannel's "extension" backend: no data path of its own, only commands
// the network config names, run as flanneld v0.28.10 runs them (runCommand):
//
//   - PreStartupCommand before the lease is acquired; its output (stdout and stderr
//     together, trimmed) becomes the lease's BackendData as a JSON string;
//   - PostStartupCommand once the lease is held, with NETWORK, SUBNET, IPV6SUBNET,
//     PUBLIC_IP and PUBLIC_IPV6 of our lease in its environment;
//   - SubnetAddCommand and SubnetRemoveCommand for each peer lease of BackendType
//     "extension" that is added (also when it is written again) or removed, with the
//     peer's SUBNET and PUBLIC_IP in the environment and its BackendData string on
//     stdin.
//
// A failing PreStartupCommand or PostStartupCommand stops the daemon; a failing
// SubnetAddCommand or SubnetRemoveCommand is logged and not retried.
type backend struct {
	opts    extensionOptions
	network netip.Prefix
	ext     encap.ExternalInterface
	log     *zap.Logger

	mu   sync.Mutex // serialises the commands and guards data
	data json.RawMessage
	ran  bool // PreStartupCommand has run (data holds its result)
}

// New returns the extension backend for cfg.
func New(cfg *lease.Config, ext encap.ExternalInterface, log *zap.Logger) (encap.Backend, error) {
	o, err := parseOptions(cfg.Backend)
	if err != nil {
		return nil, err
	}
	return &backend{opts: o, network: cfg.Network, ext: ext, log: log}, nil
}

// Type is "extension".
func (e *backend) Type() string { return extensionType }

// MTU is the external interface's, as flanneld's extension backend gives it.
func (e *backend) MTU() int { return e.ext.MTU }

// LeaseAddrs are the addresses our lease publishes: flanneld's extension backend
// publishes the external interface's own addresses, not --public-ip's or
// --public-ipv6's. The IPv4 one is 0.0.0.0 when the interface has none for the
// network (IPv6-only).
func (e *backend) LeaseAddrs() (v4, v6 netip.Addr) {
	v4 = e.ext.IfaceIP
	if !v4.Is4() || !e.ext.PublicIP.IsValid() || e.ext.PublicIP.IsUnspecified() {
		v4 = e.ext.PublicIP
	}
	v6 = e.ext.IfaceIPv6
	if !e.ext.PublicIPv6.IsValid() {
		v6 = netip.Addr{}
	}
	return v4, v6
}

// BackendData runs PreStartupCommand, once, and returns its output as a JSON string;
// nil without the command.
func (e *backend) BackendData(ctx context.Context) (json.RawMessage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ran {
		return e.data, nil
	}
	if e.opts.PreStartupCommand == "" {
		e.log.Info("no PreStartupCommand configured")
		e.ran = true
		return nil, nil
	}
	out, err := runCommand(ctx, e.opts.PreStartupCommand, nil, "")
	if err != nil {
		return nil, fmt.Errorf("PreStartupCommand %q: %w (output: %q)", e.opts.PreStartupCommand, err, out)
	}
	e.log.Info("ran PreStartupCommand", zap.String("command", e.opts.PreStartupCommand), zap.String("output", out))
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("PreStartupCommand output: %w", err)
	}
	e.data, e.ran = data, true
	return data, nil
}

// Register runs PostStartupCommand for own (each lease we come to hold).
func (e *backend) Register(ctx context.Context, own lease.Lease) error {
	if e.opts.PostStartupCommand == "" {
		e.log.Info("no PostStartupCommand configured")
		return nil
	}
	env := []string{
		"NETWORK=" + prefix4(e.network),
		"SUBNET=" + prefix4(own.Subnet),
		"IPV6SUBNET=" + prefix6(own.IPv6Subnet),
		"PUBLIC_IP=" + addr4(own.Attrs.PublicIP),
		"PUBLIC_IPV6=" + addr6(own.Attrs.PublicIPv6),
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out, err := runCommand(ctx, e.opts.PostStartupCommand, env, "")
	if err != nil {
		return fmt.Errorf("PostStartupCommand %q: %w (output: %q)", e.opts.PostStartupCommand, err, out)
	}
	e.log.Info("ran PostStartupCommand", zap.String("command", e.opts.PostStartupCommand), zap.String("output", out))
	return nil
}

// HandleEvents runs SubnetAddCommand or SubnetRemoveCommand for each event, in order,
// one at a time. Leases of another BackendType, and leases whose BackendData is not a
// JSON string, are skipped with a log line.
func (e *backend) HandleEvents(ctx context.Context, events []lease.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range events {
		if ctx.Err() != nil {
			return
		}
		l := ev.Lease
		log := e.log.With(zap.String("subnet", prefix4(l.Subnet)), zap.String("public-ip", addr4(l.Attrs.PublicIP)))
		var name, line string
		switch ev.Type {
		case lease.Added:
			name, line = "SubnetAddCommand", e.opts.SubnetAddCommand
		case lease.Removed:
			name, line = "SubnetRemoveCommand", e.opts.SubnetRemoveCommand
		default:
			log.Error("unknown lease event type", zap.Stringer("type", ev.Type))
			continue
		}
		if l.Attrs.BackendType != extensionType {
			log.Warn("ignoring a lease that is not an extension lease", zap.String("backend-type", l.Attrs.BackendType))
			continue
		}
		if line == "" {
			continue
		}
		var data string
		if len(l.Attrs.BackendData) > 0 {
			if err := json.Unmarshal(l.Attrs.BackendData, &data); err != nil {
				log.Error("peer's BackendData is not a JSON string; "+name+" not run", zap.Error(err))
				continue
			}
		}
		env := []string{"SUBNET=" + prefix4(l.Subnet), "PUBLIC_IP=" + addr4(l.Attrs.PublicIP)}
		out, err := runCommand(ctx, line, env, data)
		if err != nil {
			log.Error(name+" failed", zap.String("command", line), zap.Error(err), zap.String("output", out))
			continue
		}
		log.Info("ran "+name, zap.String("command", line), zap.String("output", out))
	}
}

// Run waits for ctx: the commands run in HandleEvents.
func (e *backend) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Close releases nothing: what the commands made is theirs.
func (e *backend) Close() error { return nil }

// errNoProgram is returned for a command line of blanks only.
var errNoProgram = errors.New("command names no program")

// runCommand runs line as flanneld v0.28.10 runs an extension command, not through
// a shell: line is split on white space (strings.Fields; quotes are not special and
// stay in the arguments), then $VAR and ${VAR} in each field, the program's name
// included, are replaced (os.Expand) by env's value or else weftd's environment's,
// an unset one by nothing. The program (looked up in weftd's PATH) gets weftd's
// environment plus env, and stdin followed by a newline on its standard input. It
// returns stdout and stderr together, white space trimmed at both ends.
func runCommand(ctx context.Context, line string, env []string, stdin string) (string, error) {
	args := strings.Fields(line)
	if len(args) == 0 {
		return "", errNoProgram
	}
	vars := map[string]string{}
	for _, kv := range append(os.Environ(), env...) {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	for i, a := range args {
		args[i] = os.Expand(a, func(k string) string { return vars[k] })
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin + "\n")
	cmd.WaitDelay = extensionKillDelay
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// prefix4, prefix6, addr4 and addr6 print a lease's subnets and addresses as flanneld
// prints them into the commands' environment: an absent IPv4 subnet as 0.0.0.0/0, an
// absent IPv6 one as ::/0, an absent IPv4 address as 0.0.0.0 and an absent IPv6
// address as <nil> (fmt's rendering of its nil pointer).
func prefix4(p netip.Prefix) string {
	if !p.IsValid() {
		return "0.0.0.0/0"
	}
	return p.String()
}

func prefix6(p netip.Prefix) string {
	if !p.IsValid() {
		return "::/0"
	}
	return p.String()
}

func addr4(a netip.Addr) string {
	if !a.IsValid() {
		return "0.0.0.0"
	}
	return a.String()
}

func addr6(a netip.Addr) string {
	if !a.IsValid() {
		return "<nil>"
	}
	return a.String()
}
