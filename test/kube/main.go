// Command kube builds the real Kubernetes control plane and kubelet from their Go
// modules as one multi-call binary, for weft's tests: bench/kubeproc runs it as
// kube-apiserver, bench/kubecluster also as kube-controller-manager, kube-scheduler
// and kubelet. The first argument names the component when it is one of those names;
// otherwise the binary is kube-apiserver (so kubeproc passes the server's flags only).
package main

import (
	"context"
	"os"
	_ "time/tzdata" // the controller manager's CronJob time zones

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
		"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	}
	newCommand := apiserver.NewAPIServerCommand
	if len(os.Args) > 1 {
		if c, ok := commands[os.Args[1]]; ok {
			newCommand = c
			os.Args = append([]string{os.Args[0]}, os.Args[2:]...)
		}
	}
	os.Exit(cli.Run(newCommand()))
}
