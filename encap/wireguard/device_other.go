//go:build !linux

package wireguard

import (
	"errors"

	"go.uber.org/zap"
)

// openWGDevice: the wireguard backend's devices are made on Linux only.
func openWGDevice(name string, mtu int, impl, socketDir string, _ *wgDeviceDrops, log *zap.Logger) (wgDevice, error) {
	return nil, errors.New("the wireguard backend runs on Linux only")
}
