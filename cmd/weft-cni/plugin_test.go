package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

// recordExec stands in for the delegate plugin (a unit test of the plugin's own
// logic; the e2e tests run the real bridge): it records each call and answers ADD
// with a result in the config's version.
type recordExec struct {
	version.PluginDecoder
	calls []call
	fail  error
}

type call struct {
	command, plugin string
	conf            map[string]any
}

func (r *recordExec) ExecPlugin(_ context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	c := call{plugin: filepath.Base(path)}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			c.command = v
		}
	}
	if err := json.Unmarshal(stdin, &c.conf); err != nil {
		return nil, err
	}
	r.calls = append(r.calls, c)
	if r.fail != nil {
		return nil, r.fail
	}
	if c.command != "ADD" {
		return nil, nil
	}
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"ips":[{"address":"10.244.3.2/24","gateway":"10.244.3.1"}]}`, c.conf["cniVersion"])), nil
}

func (r *recordExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/opt/cni/bin/" + plugin, nil
}

// TestCommands: ADD saves the delegate config and prints the delegate's result in
// the config's version; CHECK and DEL use the saved config, DEL even after
// subnet.env is gone; DEL without a saved config succeeds and calls nothing.
func TestCommands(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			dir := t.TempDir()
			env := filepath.Join(dir, "subnet.env")
			if err := os.WriteFile(env, []byte(env4), 0o600); err != nil {
				t.Fatal(err)
			}
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":"cbr0","type":"flannel","subnetFile":%q,"dataDir":%q,"delegate":{"hairpinMode":true}}`,
				v, env, filepath.Join(dir, "data"))
			rec := &recordExec{}
			var out bytes.Buffer
			p := &plugin{exec: rec, out: &out}
			args := &skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "eth0", StdinData: []byte(conf)}
			t.Setenv("CNI_COMMAND", "ADD")
			if err := p.add(args); err != nil {
				t.Fatal(err)
			}
			var res struct {
				CNIVersion string `json:"cniVersion"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.CNIVersion != v {
				t.Errorf("ADD printed %s (%v), want a result at %s", out.Bytes(), err, v)
			}
			saved, err := os.ReadFile(filepath.Join(dir, "data", "c1"))
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.calls) != 1 || rec.calls[0].command != "ADD" || rec.calls[0].plugin != "bridge" ||
				rec.calls[0].conf["hairpinMode"] != true || rec.calls[0].conf["mtu"] != float64(1450) {
				t.Fatalf("ADD calls %+v", rec.calls)
			}
			var savedConf map[string]any
			if err := json.Unmarshal(saved, &savedConf); err != nil || savedConf["ipam"] == nil {
				t.Fatalf("saved config %s: %v", saved, err)
			}

			if v == "0.4.0" || v == "1.0.0" {
				check := strings.Replace(conf, `"type":"flannel"`, `"type":"flannel","prevResult":`+out.String(), 1)
				if err := p.check(&skel.CmdArgs{ContainerID: "c1", StdinData: []byte(check)}); err != nil {
					t.Fatal(err)
				}
				c := rec.calls[len(rec.calls)-1]
				if c.command != "CHECK" || c.conf["prevResult"] == nil || c.conf["ipam"] == nil {
					t.Errorf("CHECK call %+v", c)
				}
			}

			if err := os.Remove(env); err != nil {
				t.Fatal(err)
			}
			t.Setenv("CNI_COMMAND", "DEL")
			if err := p.del(&skel.CmdArgs{ContainerID: "c1", StdinData: []byte(conf)}); err != nil {
				t.Fatal(err)
			}
			c := rec.calls[len(rec.calls)-1]
			if c.command != "DEL" || c.conf["ipam"] == nil || c.conf["name"] != "cbr0" {
				t.Errorf("DEL call %+v", c)
			}
			if _, err := os.Stat(filepath.Join(dir, "data", "c1")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("saved config after DEL: %v", err)
			}
			n := len(rec.calls)
			if err := p.del(&skel.CmdArgs{ContainerID: "c1", StdinData: []byte(conf)}); err != nil || len(rec.calls) != n {
				t.Errorf("second DEL: %v, %d calls", err, len(rec.calls)-n)
			}
		})
	}
}

// TestCommandErrors: failures say what failed; a failed delegate DEL keeps the
// saved config so the runtime's retry can still free the address.
func TestCommandErrors(t *testing.T) {
	dir := t.TempDir()
	conf := func(subnetFile string) []byte {
		return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cbr0","subnetFile":%q,"dataDir":%q}`, subnetFile, filepath.Join(dir, "data")))
	}
	p := &plugin{exec: &recordExec{}, out: &bytes.Buffer{}}
	err := p.add(&skel.CmdArgs{ContainerID: "c1", StdinData: conf(filepath.Join(dir, "none"))})
	if !errors.Is(err, ErrSubnetEnv) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "weftd or flanneld") {
		t.Errorf("ADD without subnet.env: %v", err)
	}
	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("FLANNEL_MTU=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = p.add(&skel.CmdArgs{ContainerID: "c1", StdinData: conf(bad)})
	if !errors.Is(err, ErrSubnetEnv) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "FLANNEL_MTU") {
		t.Errorf("ADD with a bad subnet.env: %v", err)
	}
	good := filepath.Join(dir, "good.env")
	if err := os.WriteFile(good, []byte(env4), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.add(&skel.CmdArgs{ContainerID: "../c1", StdinData: conf(good)}); !errors.Is(err, ErrContainerID) {
		t.Errorf("ADD with container ID ../c1: %v", err)
	}
	if err := p.check(&skel.CmdArgs{ContainerID: "c9", StdinData: conf(good)}); err == nil || !strings.Contains(err.Error(), "no config saved by ADD") {
		t.Errorf("CHECK without ADD: %v", err)
	}
	if err := p.add(&skel.CmdArgs{ContainerID: "c1", StdinData: conf(good)}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("bridge exploded")
	p.exec = &recordExec{fail: boom}
	err = p.del(&skel.CmdArgs{ContainerID: "c1", StdinData: conf(good)})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "delegate bridge DEL") {
		t.Errorf("DEL with a failing delegate: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "c1")); err != nil {
		t.Errorf("saved config after a failed DEL: %v", err)
	}
	if err := p.add(&skel.CmdArgs{ContainerID: "c2", StdinData: conf(good)}); !errors.Is(err, boom) || !strings.Contains(err.Error(), "delegate bridge ADD") {
		t.Errorf("ADD with a failing delegate: %v", err)
	}
}
