// Package handover lets a new weftd take a host over from the weftd running there,
// without a moment with neither: the one that runs holds a local socket (Listen); a
// new one that finds it held asks it to stop (Ask) once its own start-up has read
// everything it can read, and goes on when the old one says it has stopped, its
// lease manager closed and its data path left in place for the new one.
//
// The socket is an abstract Unix socket, so it belongs to the network namespace (the
// host, or a lab host) and leaves no file behind; Name derives it from what makes two
// weftds the same one (their subnet file). Both ends check that the other runs as the
// same user.
package handover

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"time"
)

// ErrHeld is returned by Listen when another process holds the name: a weftd runs.
var ErrHeld = errors.New("another weftd holds the hand-over socket")

// ErrRefused is returned by Ask when the weftd that runs does not stop for us (it is
// already stopping for another, or answered something else).
var ErrRefused = errors.New("hand-over refused")

// ErrStranger is returned when the process at the other end runs as another user.
var ErrStranger = errors.New("hand-over peer runs as another user")

// ErrUnsupported is returned where the platform has no abstract Unix sockets.
var ErrUnsupported = errors.New("hand-over needs Linux")

// Name is the socket name of the weftd that writes subnetFile: one per network and
// network namespace.
func Name(subnetFile string) string {
	sum := sha256.Sum256([]byte(subnetFile))
	return "weftd-handover-" + hex.EncodeToString(sum[:8])
}

// The protocol is lines of text: the new weftd sends askLine; the old one answers
// stoppingLine and, once it has stopped, stoppedLine, then closes the connection.
const (
	askLine      = "hand over v1"
	stoppingLine = "stopping"
	stoppedLine  = "stopped"
	busyLine     = "busy"
)

// requestTimeout bounds reading a new weftd's request line.
const requestTimeout = 5 * time.Second

// Taken is what Ask got from the weftd that stopped: its process ID, and the files
// it passed (Listener.Pass) by name, the caller's to close.
type Taken struct {
	PID   int
	Files map[string]*os.File
}

// Close closes the files not taken out of t.Files.
func (t Taken) Close() {
	for _, f := range t.Files {
		f.Close()
	}
}
