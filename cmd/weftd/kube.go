package main

import "github.com/weftnet/weft/lease"

func (d *daemon) kubeManager() (lease.Manager, error) {
	return nil, errKubeUnavailable
}
