//go:build !linux

package wgbind

import (
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
)

// New is wireguard-go's own Bind on this platform: weft's transport is Linux only.
func New(*zap.Logger) conn.Bind { return conn.NewDefaultBind() }
