package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/handover"
	"github.com/weftnet/weft/lease"
)

// ErrHandedOver is returned by Run when a new weftd on this host asked to take over:
// this one stopped as on SIGTERM, its data path left in place for the new one.
var ErrHandedOver = errors.New("handed over to a new weftd")

// handOverTimeout bounds how long a new weftd waits for the one that runs to stop.
const handOverTimeout = 30 * time.Second

// succession is one run's part in a hand-over (package handover): it holds the
// hand-over socket while this weftd runs, stops this weftd when a new one asks, and,
// when it started beside one that runs, asks that one to stop once it has read all
// it can read before touching the host.
type succession struct {
	name string
	log  *zap.Logger
	ln   *handover.Listener // held; nil while another weftd holds the name, or without hand-over
	by   atomic.Int64       // the process ID of the new weftd this one stopped for
	done chan struct{}      // closed when watch's goroutine ends
}

func newSuccession(subnetFile string, log *zap.Logger) *succession {
	return &succession{name: handover.Name(subnetFile), log: log}
}

// hold tries to hold the name. It reports whether another weftd runs (holds it); on
// any other failure weftd goes on without hand-over.
func (s *succession) hold() (running bool) {
	ln, err := handover.Listen(s.name)
	switch {
	case err == nil:
		s.ln = ln
		return false
	case errors.Is(err, handover.ErrHeld):
		return true
	}
	s.log.Warn("no hand-over: a new weftd will not find this one", zap.Error(err))
	return false
}

// takeOver asks the weftd that runs to stop, waits until it has, and holds the name.
// The sockets the old one passed on go to be (encap.SocketPasser).
func (s *succession) takeOver(ctx context.Context, be encap.Backend) error {
	for {
		actx, cancel := context.WithTimeout(ctx, handOverTimeout)
		s.log.Info("a weftd runs on this host: asking it to hand over")
		tk, err := handover.Ask(actx, s.name)
		cancel()
		switch {
		case err == nil:
			s.log.Info("the weftd that ran has stopped: taking over", zap.Int("pid", tk.PID),
				zap.Strings("sockets", slices.Sorted(maps.Keys(tk.Files))))
			if sp, ok := be.(encap.SocketPasser); ok && len(tk.Files) > 0 {
				sp.TakeSockets(tk.Files)
			} else {
				tk.Close()
			}
		case errors.Is(err, syscall.ECONNREFUSED): // it stopped before we asked
		case errors.Is(err, handover.ErrRefused): // another new weftd asked first
			s.log.Warn("the weftd that runs is handing over to another", zap.Error(err))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		case ctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("taking over from the weftd that runs: %w", err)
		}
		if !s.hold() || ctx.Err() != nil {
			return nil
		}
	}
}

// watch stops this weftd (stop) when a new one asks to take over.
func (s *succession) watch(ctx context.Context, stop context.CancelFunc) {
	s.done = make(chan struct{})
	if s.ln == nil {
		close(s.done)
		return
	}
	go func() {
		defer close(s.done)
		select {
		case <-ctx.Done():
		case r := <-s.ln.Requests():
			s.log.Info("a new weftd asks to take over: stopping, leaving the data path to it", zap.Int("pid", r.PID))
			s.by.Store(int64(r.PID))
			stop()
		}
	}()
}

// pass gives the new weftd that asked the sockets be hands on (encap.SocketPasser),
// with the word that this one has stopped (release). Call it after be's Close.
func (s *succession) pass(be encap.Backend) {
	sp, ok := be.(encap.SocketPasser)
	if !ok || s.by.Load() == 0 {
		return
	}
	files := sp.PassSockets()
	if s.ln == nil {
		for _, f := range files {
			_ = f.Close()
		}
		return
	}
	s.ln.Pass(files)
}

// release ends the succession when run returns err: it gives the name up and tells
// a new weftd that asked that this one has stopped. After a hand-over it returns
// ErrHandedOver.
func (s *succession) release(err error) error {
	if s.done != nil {
		<-s.done
	}
	if s.ln != nil {
		if cerr := s.ln.Close(); cerr != nil {
			s.log.Warn("closing the hand-over socket", zap.Error(cerr))
		}
	}
	pid := s.by.Load()
	if pid == 0 {
		return err
	}
	if err != nil {
		s.log.Warn("while stopping for the new weftd", zap.Error(err))
	}
	return fmt.Errorf("%w (pid %d)", ErrHandedOver, pid)
}

// startBeside starts be's data path beside the one of the weftd that runs, when be can
// (encap.BesideStarter), for our lease as that weftd wrote it in subnet.env. A failure
// is logged: the data path starts once that weftd has stopped, as after a restart.
func (d *daemon) startBeside(ctx context.Context, be encap.Backend) {
	bs, ok := be.(encap.BesideStarter)
	if !ok {
		return
	}
	env, err := lease.ReadSubnetEnv(d.cfg.SubnetFile)
	if err != nil {
		d.log.Info("not starting beside the weftd that runs: no subnet.env of it", zap.Error(err))
		return
	}
	own := lease.Lease{Subnet: env.Subnet.Masked(), IPv6Subnet: env.IPv6Subnet.Masked()}
	if err := bs.StartBeside(ctx, own); err != nil {
		d.log.Warn("could not start the data path beside the weftd that runs", zap.Error(err))
		return
	}
	d.log.Info("data path started beside the weftd that runs", zap.Stringer("subnet", leaseName(own)))
}
