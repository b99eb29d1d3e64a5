package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weftnet/weft/bench/netns"
)

// State is what a lab records in its state file, for `weft-bench lab status|down`
// run from another process.
type State struct {
	Keeper     int         `json:"keeper,omitempty"` // pid of the process that holds the lab
	Dir        string      `json:"dir"`
	Router     string      `json:"router"`
	Etcd       string      `json:"etcd"`       // client URLs, comma-separated
	Namespaces []string    `json:"namespaces"` // every namespace, router included
	Pids       []int       `json:"pids"`       // daemons
	Hosts      []HostState `json:"hosts"`
}

// HostState describes one host of a recorded lab.
type HostState struct {
	Name    string `json:"name"`
	LAN     string `json:"lan"`
	NS      string `json:"netns"`
	Addr    string `json:"addr"`
	Daemon  string `json:"daemon,omitempty"`
	Subnet  string `json:"subnet,omitempty"`
	PodNS   string `json:"pod_netns,omitempty"`
	PodAddr string `json:"pod_addr,omitempty"`
	Log     string `json:"log,omitempty"`
}

// State returns the lab's current record.
func (l *Lab) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := State{Keeper: os.Getpid(), Dir: l.dir}
	if l.router != nil {
		s.Router = l.router.Name
		s.Namespaces = append(s.Namespaces, l.router.Name)
	}
	s.Etcd = strings.Join(l.endpoints, ",")
	for _, ns := range l.nsExtra {
		s.Namespaces = append(s.Namespaces, ns.Name)
	}
	for _, p := range l.pods {
		s.Namespaces = append(s.Namespaces, p.NS.Name)
	}
	for _, h := range l.hosts {
		if h.NS == nil {
			continue // still being made
		}
		hs := HostState{Name: h.Name, LAN: h.LAN, NS: h.NS.Name, Addr: h.Addr.String()}
		for _, d := range l.daemons {
			if d.Host == h {
				hs.Daemon, hs.Log = d.Binary, d.LogPath
				if env := d.Env(); env.Subnet.IsValid() {
					hs.Subnet = env.Subnet.String()
				}
			}
		}
		for _, p := range l.pods {
			if p.Host == h {
				hs.PodNS, hs.PodAddr = p.NS.Name, p.Addr.String()
			}
		}
		s.Hosts = append(s.Hosts, hs)
	}
	for _, d := range l.daemons {
		// Only running daemons: the pid of one that ended may be another's now.
		if exited, _ := d.Exited(); !exited && d.Pid() > 0 {
			s.Pids = append(s.Pids, d.Pid())
		}
	}
	return s
}

// saveState rewrites the state file, if the lab has one. Errors are logged: the
// file only helps a later `lab down`.
func (l *Lab) saveState() {
	if l.spec.StateFile == "" {
		return
	}
	if err := WriteState(l.spec.StateFile, l.State()); err != nil {
		l.log.Warn("lab state file", errField(err))
	}
}

// WriteState writes s to path atomically.
func WriteState(path string, s State) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// ReadState reads a state file written by a lab.
func ReadState(path string) (State, error) {
	var s State
	data, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("state file %s: %w", path, err)
	}
	return s, nil
}

// Down removes a lab recorded in the state file at path, from any process: it asks
// the keeper to close the lab, then kills what is left, deletes the namespaces and
// the directory, and removes the state file. A missing file is no error.
func Down(path string) error {
	s, err := ReadState(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if s.Keeper > 0 && s.Keeper != os.Getpid() && syscall.Kill(s.Keeper, syscall.SIGTERM) == nil {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && syscall.Kill(s.Keeper, 0) == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, p := range s.Pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	var first error
	for i := len(s.Namespaces) - 1; i >= 0; i-- {
		if err := (&netns.NS{Name: s.Namespaces[i]}).Close(); err != nil && first == nil {
			first = err
		}
	}
	if s.Dir != "" {
		_ = os.RemoveAll(s.Dir)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
		first = err
	}
	return first
}

// Leftover returns the names among names that still exist as namespaces.
func Leftover(names []string) []string {
	var left []string
	for _, n := range names {
		if netns.Exists(n) {
			left = append(left, n)
		}
	}
	return left
}
