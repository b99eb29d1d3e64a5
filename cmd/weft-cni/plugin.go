package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
)

// ErrContainerID is returned for a container ID that cannot name a file in dataDir.
var ErrContainerID = errors.New("container ID")

// plugin runs the CNI commands. exec runs the delegate; nil means the real one
// (the plugin named by the delegate's type, found in CNI_PATH). ADD's result goes
// to out, nil meaning stdout.
type plugin struct {
	exec invoke.Exec
	out  io.Writer
}

// add builds the delegate config from the network config and subnet.env, saves it
// under dataDir for DEL and CHECK, and calls the delegate's ADD, printing its result.
func (p *plugin) add(args *skel.CmdArgs) error {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(n.SubnetFile)
	if err != nil {
		return fmt.Errorf("%w: %w (is weftd or flanneld running on this node?)", ErrSubnetEnv, err)
	}
	env, err := parseSubnetEnv(data)
	if err != nil {
		return fmt.Errorf("%s: %w", n.SubnetFile, err)
	}
	d, err := delegateConf(n, env)
	if err != nil {
		return err
	}
	conf, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("%w: delegate config: %w", ErrNetConf, err)
	}
	path, err := savedPath(n.DataDir, args.ContainerID)
	if err != nil {
		return err
	}
	if err := saveFile(path, conf); err != nil {
		return err
	}
	result, err := invoke.DelegateAdd(context.Background(), d["type"].(string), conf, p.exec)
	if err != nil {
		return fmt.Errorf("delegate %s ADD: %w", d["type"], err)
	}
	if p.out != nil {
		return result.PrintTo(p.out)
	}
	return result.Print()
}

// del calls the delegate's DEL with the config saved by ADD, so that it works when
// subnet.env is gone or has changed, and then removes the saved config. Without one
// there is nothing of ours to remove, which is success by the spec.
func (p *plugin) del(args *skel.CmdArgs) error {
	path, conf, typ, err := p.saved(args)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if err := invoke.DelegateDel(context.Background(), typ, conf, p.exec); err != nil {
		return fmt.Errorf("delegate %s DEL: %w", typ, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the saved delegate config: %w", err)
	}
	return nil
}

// check calls the delegate's CHECK with the config saved by ADD and the runtime's
// prevResult (CHECK exists from spec 0.4.0 on; skel refuses it before).
func (p *plugin) check(args *skel.CmdArgs) error {
	path, conf, typ, err := p.saved(args)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("CHECK: no config saved by ADD: %w", err)
	} else if err != nil {
		return err
	}
	var stdin struct {
		CNIVersion string          `json:"cniVersion"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	var d map[string]any
	if err := json.Unmarshal(args.StdinData, &stdin); err != nil {
		return fmt.Errorf("%w: %w", ErrNetConf, err)
	}
	if err := json.Unmarshal(conf, &d); err != nil {
		return fmt.Errorf("saved delegate config %s: %w", path, err)
	}
	d["cniVersion"] = stdin.CNIVersion
	if len(stdin.PrevResult) > 0 {
		d["prevResult"] = stdin.PrevResult
	}
	conf, err = json.Marshal(d)
	if err != nil {
		return err
	}
	if err := invoke.DelegateCheck(context.Background(), typ, conf, p.exec); err != nil {
		return fmt.Errorf("delegate %s CHECK: %w", typ, err)
	}
	return nil
}

// saved finds the delegate config ADD saved for the container of args (its netconf
// names the data directory) and returns its path, contents and delegate type. A
// missing file is an error that wraps fs.ErrNotExist.
func (p *plugin) saved(args *skel.CmdArgs) (path string, conf []byte, typ string, err error) {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return "", nil, "", err
	}
	if path, err = savedPath(n.DataDir, args.ContainerID); err != nil {
		return "", nil, "", err
	}
	conf, typ, err = loadSaved(path)
	return path, conf, typ, err
}

// savedPath is where ADD keeps the delegate config of a container.
func savedPath(dataDir, containerID string) (string, error) {
	if containerID == "" || containerID == "." || containerID == ".." || filepath.Base(containerID) != containerID {
		return "", fmt.Errorf("%w %q cannot name a file in %s", ErrContainerID, containerID, dataDir)
	}
	return filepath.Join(dataDir, containerID), nil
}

// saveFile writes data to path through a temporary file and a rename, so that a DEL
// never reads half a config.
func saveFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("saving the delegate config: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("saving the delegate config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("saving the delegate config: %w", err)
	}
	return nil
}

// loadSaved reads a saved delegate config and its plugin type.
func loadSaved(path string) ([]byte, string, error) {
	conf, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var d struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(conf, &d); err != nil || d.Type == "" {
		return nil, "", fmt.Errorf("saved delegate config %s has no plugin type: %w", path, errors.Join(err, ErrNetConf))
	}
	return conf, d.Type, nil
}
