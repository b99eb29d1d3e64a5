package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// notifier speaks systemd's notify protocol (Type=notify) when weftd runs under
// systemd ($NOTIFY_SOCKET set): READY=1 once the data path runs and subnet.env is
// written, WATCHDOG=1 every half $WATCHDOG_USEC while weftd runs (WatchdogSec=), and
// STOPPING=1 when a signal starts the shutdown. Without $NOTIFY_SOCKET it does nothing.
type notifier struct {
	log       *zap.Logger
	readyOnce sync.Once
}

func (n *notifier) send(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn("systemd notify failed", zap.String("state", state), zap.Error(err))
	}
}

// ready sends READY=1 with a status line, once.
func (n *notifier) ready(status string) {
	n.readyOnce.Do(func() {
		n.send(sd.SdNotifyReady + "\nSTATUS=" + status)
		n.log.Debug("told systemd we are ready")
	})
}

// start runs the watchdog pings and sends STOPPING=1 when ctx ends (a signal) or
// stop is called (run returns on an error); stop waits for the goroutine.
func (n *notifier) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	every, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn("systemd watchdog settings ignored", zap.Error(err))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var tick <-chan time.Time
		if every > 0 {
			t := time.NewTicker(every / 2)
			defer t.Stop()
			tick = t.C
			n.log.Info("pinging the systemd watchdog", zap.Duration("every", every/2))
		}
		for {
			select {
			case <-ctx.Done():
				n.send(sd.SdNotifyStopping)
				return
			case <-tick:
				n.send(sd.SdNotifyWatchdog)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// readyStatus is the STATUS= line sent with READY=1.
func readyStatus(subnet fmt.Stringer, backend string) string {
	return fmt.Sprintf("leased %v, %s backend", subnet, backend)
}
