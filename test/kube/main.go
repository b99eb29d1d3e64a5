// Command kube-apiserver builds the real Kubernetes API server from its Go module,
// for the tests of weft's Kubernetes subnet manager (internal/kubeproc runs it).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
