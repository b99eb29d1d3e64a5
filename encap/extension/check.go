package extension

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// parseOptions reads the Backend object as New does: the four commands, none of them
// blanks only (flanneld runs a command that is not empty; one of blanks only makes it
// panic).
func parseOptions(raw json.RawMessage) (extensionOptions, error) {
	var o extensionOptions
	if err := encap.DecodeOptions(extensionType, raw, &o); err != nil {
		return o, err
	}
	for _, c := range o.commands() {
		if c.line != "" && len(strings.Fields(c.line)) == 0 {
			return o, fmt.Errorf("%w: extension backend: %s %q names no program", encap.ErrBadOption, c.name, c.line)
		}
	}
	return o, nil
}

// commands are the four options with their names, in the order they run.
func (o extensionOptions) commands() []struct{ name, line string } {
	return []struct{ name, line string }{
		{"PreStartupCommand", o.PreStartupCommand}, {"PostStartupCommand", o.PostStartupCommand},
		{"SubnetAddCommand", o.SubnetAddCommand}, {"SubnetRemoveCommand", o.SubnetRemoveCommand},
	}
}

// Check says what New would do with cfg, and how that differs from flanneld, without
// building the backend or running a command: New's option checks (parseOptions).
func Check(cfg *lease.Config) ([]encap.Note, error) {
	o, err := parseOptions(cfg.Backend)
	if err != nil {
		return nil, err
	}
	var notes []encap.Note
	for _, c := range o.commands() {
		if c.line == "" {
			notes = append(notes, encap.Do(c.name+": none"))
			continue
		}
		notes = append(notes, encap.Do(fmt.Sprintf("%s: runs %q, split on blanks with $VAR replaced, no shell (quotes stay in the arguments)",
			c.name, strings.Fields(c.line)[0])))
	}
	notes = append(notes,
		encap.Do("no data path of its own; FLANNEL_MTU is the interface's; the lease publishes the interface's addresses (not --public-ip's)"),
		encap.Differs("The extension backend", "a command still running when weftd stops is killed (flanneld leaves it); "+
			"PostStartupCommand runs again when weftd takes a new lease after losing its own (flanneld exits)"))
	return notes, nil
}
