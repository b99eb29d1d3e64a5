package testenv_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
)

// childEnv makes the test binary, run again by TestOnInterrupt, act as the interrupted
// test: TestInterruptedChild registers undos and waits to be signalled.
const childEnv = "WEFT_TESTENV_INTERRUPT_CHILD"

// TestInterruptedChild is the child's side: with childEnv set to a directory it
// registers two undos that append their names to a file there (and, when the value
// ends in ",netns", makes a namespace with netnstest), reports what it made on stdout
// and waits to be signalled.
func TestInterruptedChild(t *testing.T) {
	v := os.Getenv(childEnv)
	if v == "" {
		t.Skip("run by TestOnInterrupt")
	}
	dir, withNS := strings.CutSuffix(v, ",netns")
	log := filepath.Join(dir, "undone")
	for _, name := range []string{"first", "second"} {
		testenv.OnInterrupt(t, name, func() error {
			f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = fmt.Fprintln(f, name)
			return err
		})
	}
	if withNS {
		fmt.Printf("netns %s\n", netnstest.New(t, "wti").Name)
	}
	fmt.Println("ready")
	time.Sleep(time.Minute) // the parent signals long before
	t.Error("not interrupted")
}

// TestOnInterrupt: a test binary that gets SIGINT or SIGTERM while a test runs undoes
// what was registered, newest first, and exits 1; a namespace made with netnstest is
// gone afterwards.
func TestOnInterrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sig    syscall.Signal
		withNS bool
	}{
		{"sigint", syscall.SIGINT, false},
		{"sigterm", syscall.SIGTERM, false},
		{"sigint-netns", syscall.SIGINT, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.withNS {
				testenv.NeedRoot(t)
				testenv.NeedTools(t, "ip")
			}
			dir := t.TempDir()
			v := dir
			if tc.withNS {
				v += ",netns"
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptedChild$", "-test.v")
			cmd.Env = append(os.Environ(), childEnv+"="+v)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var nsName string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "netns "); ok {
					nsName = n
				}
				if sc.Text() == "ready" {
					break
				}
			}
			if tc.withNS && (nsName == "" || !netns.Exists(nsName)) {
				t.Fatalf("child made no namespace (%q); stderr:\n%s", nsName, stderr.String())
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = bufio.NewReader(out).WriteTo(new(strings.Builder)) }()
			err = cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Errorf("child: %v, want exit status 1; stderr:\n%s", err, stderr.String())
			}
			got, err := os.ReadFile(filepath.Join(dir, "undone"))
			if err != nil || string(got) != "second\nfirst\n" {
				t.Errorf("undone: %q, %v; want second then first", got, err)
			}
			if !strings.Contains(stderr.String(), "removing what") {
				t.Errorf("no word on stderr of the interrupt: %q", stderr.String())
			}
			if tc.withNS && netns.Exists(nsName) {
				_ = exec.Command("ip", "netns", "del", nsName).Run()
				t.Errorf("namespace %s left behind after the interrupt", nsName)
			}
		})
	}
}
