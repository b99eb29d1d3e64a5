//go:build !linux

package proxy

import (
	"errors"
	"fmt"
	"time"
)

type busyPoller struct{}

func newBusyPoller(TUN, time.Duration) (*busyPoller, bool, error) {
	return nil, false, fmt.Errorf("busy poll: %w", errors.ErrUnsupported)
}

func (bp *busyPoller) stop()      {}
func (bp *busyPoller) release()   {}
func (w *worker) busyPoll() error { return errors.ErrUnsupported }
