package examples

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// TestExamplesExitZeroOnSignal: Ctrl-C (SIGINT) is the normal way to stop an example by hand,
// SIGTERM the way an orchestrator stops it (Kubernetes, ECS, systemd). Each is built and run as
// a user runs it, against the local Kinesis and DynamoDB servers (make test starts them; under
// KINESUB_KINESIS_BACKEND=kinesistest the Kinesis server is one in the test process, which the
// examples reach at the plain-HTTP address testenv sets), and sent the signal once it is at
// work: it exits with status 0, and its shard leases in the lease table are free (the process
// example keeps its leases in memory and reports how many it still holds; dynamosink keeps
// them in memory too, and deletes its tables).
func TestExamplesExitZeroOnSignal(t *testing.T) {
	bins := buildExamples(t, "quickstart", "service", "admin-seek", "demo", "process", "dynamosink")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(signalName(sig), func(t *testing.T) { examplesExitZeroOn(t, bins, sig) })
	}
}

// signalName is the signal's name as a shell spells it.
func signalName(sig syscall.Signal) string {
	if sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	return "SIGINT"
}

// examplesExitZeroOn runs each example and stops it with sig.
func examplesExitZeroOn(t *testing.T, bins map[string]string, sig syscall.Signal) {
	kc, dc := testenv.Kinesis(t), testenv.DynamoDB(t)

	// awaitHeld waits until a shard lease of stream in table has an owner whose name is held's.
	awaitHeld := func(t *testing.T, ex *example, table, stream string, held func(owner string) bool) {
		t.Helper()
		store := lease.NewDynamoDB(dc, table)
		ex.await(t, func() bool {
			ls, err := store.List(context.Background())
			if err != nil {
				return false // the example creates the table
			}
			for _, l := range shardLeases(ls, stream) {
				if l.Owner != "" && held(l.Owner) {
					return true
				}
			}
			return false
		})
	}
	requireReleased := func(t *testing.T, table, stream string) {
		t.Helper()
		ls, err := lease.NewDynamoDB(dc, table).List(context.Background())
		if err != nil {
			t.Fatalf("list the leases of %s: %v", table, err)
		}
		shards := shardLeases(ls, stream)
		if len(shards) == 0 {
			t.Fatalf("no shard lease of %s in %s", stream, table)
		}
		beats := map[string]string{} // heartbeat row → its owner
		for _, l := range ls {
			beats[l.Key] = l.Owner
		}
		for _, l := range shards {
			// A shard lease is free with no owner; one bound to an owner whose heartbeat row
			// is gone (or released) is free too: peers take it at once.
			if l.Owner == "" {
				continue
			}
			if beat := stream + "/~v2/owner/" + l.Owner; beats[beat] == "" {
				t.Logf("lease %s names %s, whose heartbeat row is gone: free to take, not written free", l.Key, l.Owner)
				continue
			}
			t.Errorf("lease %s still held by %s after the example exited", l.Key, l.Owner)
		}
	}
	byPID := func(ex *example) func(string) bool {
		// The default owner name is <host>-<pid>-<random>.
		return func(owner string) bool { return strings.Contains(owner, fmt.Sprintf("-%d-", ex.cmd.Process.Pid)) }
	}

	t.Run("quickstart", func(t *testing.T) {
		// It reads the stream "orders" with the table "orders-leases", and creates only the table.
		if _, err := kc.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String("orders"),
			ShardCount: aws.Int32(1)}); err != nil && !errors.As(err, new(*types.ResourceInUseException)) {
			t.Fatal(err)
		}
		testenv.WaitActive(t, kc, "orders")
		ex := start(t, bins["quickstart"])
		awaitHeld(t, ex, "orders-leases", "orders", byPID(ex))
		ex.signalAndExitZero(t, sig)
		requireReleased(t, "orders-leases", "orders")
	})
	t.Run("service", func(t *testing.T) {
		stream, table := testenv.Name(t), testenv.Name(t)
		testenv.CreateStream(t, kc, stream, 2)
		ex := start(t, bins["service"], "-stream", stream, "-table", table, "-metrics", "127.0.0.1:0")
		awaitHeld(t, ex, table, stream, byPID(ex))
		ex.signalAndExitZero(t, sig)
		requireReleased(t, table, stream)
		ex.requireOutput(t, "leases released")
	})
	t.Run("admin-seek", func(t *testing.T) {
		stream, table := testenv.Name(t), testenv.Name(t)
		testenv.CreateStream(t, kc, stream, 2)
		ex := start(t, bins["admin-seek"], "-stream", stream, "-table", table, "-addr", "127.0.0.1:0")
		awaitHeld(t, ex, table, stream, byPID(ex))
		ex.signalAndExitZero(t, sig)
		requireReleased(t, table, stream)
	})
	t.Run("demo", func(t *testing.T) {
		// It names its stream and table itself, and says which.
		ex := start(t, bins["demo"])
		var table, stream string
		ex.awaitLine(t, func(line string) bool {
			_, err := fmt.Sscanf(line, "lease table %s ready", &table)
			return err == nil
		})
		ex.awaitLine(t, func(line string) bool {
			_, err := fmt.Sscanf(line, "stream %s created", &stream)
			return err == nil
		})
		awaitHeld(t, ex, table, stream, func(owner string) bool { return strings.HasPrefix(owner, "demo-a") })
		ex.signalAndExitZero(t, sig)
		requireReleased(t, table, stream)
	})
	t.Run("process", func(t *testing.T) {
		// It runs its own in-process Kinesis server and an in-memory lease store.
		ex := start(t, bins["process"])
		ex.awaitLine(t, func(line string) bool { return strings.Contains(line, "attempt 1 failed") })
		ex.signalAndExitZero(t, sig)
		ex.requireOutput(t, "leases still held: 0")
	})
	t.Run("dynamosink", func(t *testing.T) {
		// It runs its own in-process Kinesis server, keeps its leases in memory, and makes two
		// tables, which it deletes also when interrupted.
		ex := start(t, bins["dynamosink"])
		var marks, balances string
		ex.awaitLine(t, func(line string) bool {
			_, err := fmt.Sscanf(line, "tables %s and %s ready", &marks, &balances)
			return err == nil
		})
		ex.signalAndExitZero(t, sig)
		ex.requireOutput(t, "interrupted: "+sig.String()+" signal received")
		for _, table := range []string{marks, balances} {
			out, err := dc.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err == nil && out.Table.TableStatus != dynamodbtypes.TableStatusDeleting {
				t.Errorf("table %s is %s after the example exited, not deleted", table, out.Table.TableStatus)
			} else if err != nil && !errors.As(err, new(*dynamodbtypes.ResourceNotFoundException)) {
				t.Errorf("describe %s: %v", table, err)
			}
		}
	})
}

// shardLeases returns the shard leases of stream among ls, <stream>/<shard id> (not its
// bookkeeping rows: heartbeats, the change row, the lease protocol's marker).
func shardLeases(ls []lease.Lease, stream string) []lease.Lease {
	var out []lease.Lease
	for _, l := range ls {
		if shard, ok := strings.CutPrefix(l.Key, stream+"/"); ok && strings.HasPrefix(shard, "shardId-") {
			out = append(out, l)
		}
	}
	return out
}

// buildExamples builds the named examples (directories of this module) and returns their
// binaries by name.
func buildExamples(t *testing.T, names ...string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, n := range names {
		args = append(args, "./"+n)
	}
	cmd := exec.Command("go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bins := map[string]string{}
	for _, n := range names {
		bins[n] = filepath.Join(dir, n)
	}
	return bins
}

// example is a running example: its output lines (stdout and stderr) arrive on lines.
type example struct {
	cmd    *exec.Cmd
	lines  chan string
	output []string // the lines read so far
	done   chan struct{}
	err    error // Wait's, once done is closed
}

const exampleDeadline = time.Minute

func start(t *testing.T, bin string, args ...string) *example {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ() // the endpoints and credentials of the local servers
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ex := &example{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() { // ends when the pipe is closed, after Wait
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ex.lines <- sc.Text()
		}
		close(ex.lines)
	}()
	go func() {
		ex.err = cmd.Wait()
		w.Close()
		close(ex.done)
	}()
	t.Cleanup(func() {
		select {
		case <-ex.done:
		default:
			_ = cmd.Process.Kill()
			<-ex.done
		}
		for range ex.lines { // let the reader end
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", filepath.Base(bin), strings.Join(ex.output, "\n"))
		}
	})
	return ex
}

// awaitLine waits for an output line for which match is true.
func (ex *example) awaitLine(t *testing.T, match func(string) bool) {
	t.Helper()
	deadline := time.After(exampleDeadline)
	for {
		select {
		case line, ok := <-ex.lines:
			if !ok {
				t.Fatalf("the example exited (%v) before printing the line awaited", ex.err)
			}
			ex.output = append(ex.output, line)
			if match(line) {
				return
			}
		case <-deadline:
			t.Fatal("the example did not print the line awaited in time")
		}
	}
}

// await waits until cond holds, looking again every 50ms while the example runs.
func (ex *example) await(t *testing.T, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(exampleDeadline)
	for !cond() {
		select {
		case line, ok := <-ex.lines:
			if !ok {
				t.Fatalf("the example exited (%v) before the condition awaited", ex.err)
			}
			ex.output = append(ex.output, line)
		case <-tick.C:
		case <-deadline:
			t.Fatal("condition not met in time")
		}
	}
}

// signalAndExitZero sends sig and requires exit status 0, reading the rest of the output.
func (ex *example) signalAndExitZero(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := ex.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(exampleDeadline)
	for open := true; open; {
		select {
		case line, ok := <-ex.lines: // closed once the example has exited
			if open = ok; ok {
				ex.output = append(ex.output, line)
			}
		case <-deadline:
			t.Fatalf("the example did not exit in time after %s", signalName(sig))
		}
	}
	<-ex.done
	if ex.err != nil {
		t.Fatalf("after %s the example exited with %v, not status 0", signalName(sig), ex.err)
	}
}

func (ex *example) requireOutput(t *testing.T, want string) {
	t.Helper()
	if !strings.Contains(strings.Join(ex.output, "\n"), want) {
		t.Errorf("the example's output lacks %q", want)
	}
}
