// Command testpod is the one program of bench/kubecluster's images: the pods'
// sandbox ("pause") and the test pods. It waits for SIGTERM or SIGINT and exits 0.
// The tests reach a pod's network namespace from the node to run ping and iperf3.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
