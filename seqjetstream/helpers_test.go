package seqjetstream_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqjetstream"
)

// startServer starts an embedded nats-server with JetStream for the test,
// on 127.0.0.1 and a free port, and returns its URL.
func startServer(t testing.TB) string {
	t.Helper()
	return startServerOf(t).ClientURL()
}

// startServerOf is startServer for a test that stops the server itself;
// Shutdown may be called more than once.
func startServerOf(t testing.TB) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

// connect opens a connection closed at the end of the test.
func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// newStream creates a memory stream name on subjects.
func newStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	cfg.Storage = jetstream.MemoryStorage
	s, err := js.CreateStream(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newConsumer creates a durable pull consumer with explicit acks; cfg's
// other fields are kept.
func newConsumer(t testing.TB, s jetstream.Stream, cfg jetstream.ConsumerConfig) jetstream.Consumer {
	t.Helper()
	cfg.AckPolicy = jetstream.AckExplicitPolicy
	c, err := s.CreateOrUpdateConsumer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publish stores one message on subj and returns its stream sequence.
func publish(t testing.TB, js jetstream.JetStream, subj, data string, hdr ...string) uint64 {
	t.Helper()
	m := nats.NewMsg(subj)
	m.Data = []byte(data)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	ack, err := js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// running is a Consumer whose Run goes on until the test closes it.
type running struct {
	c    *seqjetstream.Consumer
	done chan struct{}
	err  error // Run's result, once done is closed
}

func start(t testing.TB, c *seqjetstream.Consumer) *running {
	t.Helper()
	r := &running{c: c, done: make(chan struct{})}
	go func() {
		r.err = c.Run(context.Background())
		close(r.done)
	}()
	t.Cleanup(func() { r.close(t, 10*time.Second) })
	return r
}

// close closes the consumer within d and waits for Run to return.
func (r *running) close(t testing.TB, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := r.c.Close(ctx)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Errorf("Run did not return after Close")
	}
	return err
}

// eventually waits, up to 20s, for cond to hold; it fails the test with
// what, formatted, otherwise. An argument made by now is evaluated then.
func eventually(t testing.TB, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for i, a := range args {
				if f, ok := a.(lazy); ok {
					args[i] = f()
				}
			}
			t.Fatalf("timed out waiting for "+what, args...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// lazy is an argument of eventually evaluated when it fails.
type lazy func() any

// statsOf is c's Stats, for eventually's message.
func statsOf(c *seqjetstream.Consumer) lazy { return func() any { return c.Stats() } }

// ledger records what handlers applied, per key, safe for concurrent use.
type ledger struct {
	mu    sync.Mutex
	byKey map[string][]uint64
	calls map[uint64]int // handler calls per stream sequence
}

func newLedger() *ledger {
	return &ledger{byKey: make(map[string][]uint64), calls: make(map[uint64]int)}
}

func (l *ledger) apply(key string, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byKey[key] = append(l.byKey[key], seq)
}

func (l *ledger) call(seq uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[seq]++
	return l.calls[seq]
}

// calledFor returns how many times call(seq) was made.
func (l *ledger) calledFor(seq uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[seq]
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.byKey {
		n += len(s)
	}
	return n
}

func (l *ledger) key(k string) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint64(nil), l.byKey[k]...)
}

func seqOf(t testing.TB, m jetstream.Msg) uint64 {
	meta, err := m.Metadata()
	if err != nil {
		t.Error(err)
		return 0
	}
	return meta.Sequence.Stream
}

func info(t testing.TB, c jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	i, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// discard is a logger for tests that expect failures to be logged.
var discard = slog.New(slog.DiscardHandler)

// panicError is the core's, which the handler's panics come as.
type panicError = seqsched.PanicError

// runtimeGoexit ends the calling goroutine, as t.FailNow does.
func runtimeGoexit() { runtime.Goexit() }

var seqschedErrWouldDeadlock = seqsched.ErrWouldDeadlock

var seqschedErrGoexit = seqsched.ErrGoexit

// applier returns a handler that applies each message to l under key "k",
// in the order the handler runs.
func (l *ledger) applier(t testing.TB) seqjetstream.Handler {
	return func(ctx context.Context, m jetstream.Msg) error {
		l.apply("k", seqOf(t, m))
		return nil
	}
}

// pinnedConsumer returns a Consumer of cons with the bound the pinned
// tests use (WithMaxBuffered(100)), pulls that wait at most expiry, and
// extra options after them.
func pinnedConsumer(t testing.TB, cons jetstream.Consumer, h seqjetstream.Handler, expiry time.Duration, extra ...seqjetstream.Option) *seqjetstream.Consumer {
	t.Helper()
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, h,
		append([]seqjetstream.Option{seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(expiry)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// journal collects the log records of a test's instances, each with the
// time since the test began and the instance's name, and logs them if the
// test fails: what each instance saw, for the failure's report.
type journal struct {
	mu    sync.Mutex
	began time.Time
	lines []string
}

func newJournal(t testing.TB) *journal {
	j := &journal{began: time.Now()}
	t.Cleanup(func() {
		if t.Failed() {
			j.mu.Lock()
			defer j.mu.Unlock()
			for _, l := range j.lines {
				t.Log(l)
			}
		}
	})
	return j
}

// notef adds a line of the test's own.
func (j *journal) notef(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf("%8.3fs ", time.Since(j.began).Seconds())+fmt.Sprintf(format, args...))
}

// logger returns a logger whose records go to the journal under name.
func (j *journal) logger(name string) *slog.Logger {
	return slog.New(journalLog{j, name})
}

type journalLog struct {
	j    *journal
	name string
}

func (h journalLog) Enabled(context.Context, slog.Level) bool { return true }
func (h journalLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.j.notef("%s %s %s%s", h.name, r.Level, r.Message, b.String())
	return nil
}
func (h journalLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h journalLog) WithGroup(string) slog.Handler      { return h }

// tcpProxy forwards connections to a server, and can lose what the server
// sends on them, as a broken network does, then cut them: a client that
// reconnects through it gets a fresh connection that forwards again.
type tcpProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	pairs   []*proxied
	accepts sync.WaitGroup // the accept loop
	copies  sync.WaitGroup // each connection's two copy loops
}

// proxied is one client connection and its connection to the server.
type proxied struct {
	client, server net.Conn
	lose           atomic.Bool // what the server sends is read and dropped
}

// startProxy starts a proxy to target (host:port), closed with the test.
func startProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	p.accepts.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.accepts.Wait()
		p.cut()
		p.copies.Wait()
	})
	return p
}

// url is the proxy's client URL.
func (p *tcpProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *tcpProxy) accept() {
	defer p.accepts.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &proxied{client: c, server: s}
		p.mu.Lock()
		p.pairs = append(p.pairs, pr)
		p.mu.Unlock()
		p.copies.Add(2)
		go func() {
			defer p.copies.Done()
			_, _ = io.Copy(s, c)
			pr.close()
		}()
		go func() {
			defer p.copies.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !pr.lose.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			pr.close()
		}()
	}
}

func (pr *proxied) close() {
	_ = pr.client.Close()
	_ = pr.server.Close()
}

// loseFromServer makes the connections open now drop what the server
// sends on them, until cut.
func (p *tcpProxy) loseFromServer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.pairs {
		pr.lose.Store(true)
	}
}

// cut closes the connections open now, both ways.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	prs := p.pairs
	p.pairs = nil
	p.mu.Unlock()
	for _, pr := range prs {
		pr.close()
	}
}
