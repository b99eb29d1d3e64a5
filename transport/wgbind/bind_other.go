//go:build !linux

package wgbind

import (
	"sync/atomic"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
)

// New is wireguard-go's own Bind on this platform: weft's transport is Linux only.
func New(*zap.Logger, *atomic.Uint64) conn.Bind { return conn.NewDefaultBind() }
