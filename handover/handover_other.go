//go:build !linux

package handover

import (
	"context"
	"os"
)

// Listener is Linux's; elsewhere Listen fails with ErrUnsupported.
type Listener struct{}

// Request is a new weftd's request to take over.
type Request struct{ PID int }

// Listen fails with ErrUnsupported.
func Listen(string) (*Listener, error) { return nil, ErrUnsupported }

// Requests gives nothing.
func (*Listener) Requests() <-chan Request { return nil }

// Pass closes the files.
func (*Listener) Pass(files map[string]*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Close does nothing.
func (*Listener) Close() error { return nil }

// Ask fails with ErrUnsupported.
func Ask(context.Context, string) (Taken, error) { return Taken{}, ErrUnsupported }
