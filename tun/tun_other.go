//go:build !linux

package tun

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Device is not implemented on this platform.
type Device struct{}

// Queue is not implemented on this platform.
type Queue struct{}

// Open fails: weft's TUN device is Linux only.
func Open(cfg Config, log *zap.Logger) (*Device, error) {
	return nil, fmt.Errorf("tun %s: %w", cfg.Name, errors.ErrUnsupported)
}

func (d *Device) Queues() []*Queue                         { return nil }
func (d *Device) Configure(Setup) error                    { return errors.ErrUnsupported }
func (d *Device) Close() error                             { return nil }
func (d *Device) Remove() error                            { return nil }
func (d *Device) Found() bool                              { return false }
func (q *Queue) Read([][]byte, []int, int) (int, error)    { return 0, errors.ErrUnsupported }
func (q *Queue) TryRead([][]byte, []int, int) (int, error) { return 0, errors.ErrUnsupported }
func (q *Queue) Write([][]byte, int) (int, error)          { return 0, errors.ErrUnsupported }
func (q *Queue) Close() error                              { return nil }
func (q *Queue) SetReadDeadline(time.Time) error           { return errors.ErrUnsupported }

func (q *Queue) VnetHdr() bool { return false }
func (q *Queue) USO() bool     { return false }
