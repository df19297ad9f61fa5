package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/seqsched/seqsched/examples/chat/internal/hub"
	"github.com/seqsched/seqsched/seqprom"
)

// usageError is an error in the command line: run returns exit code 2 for
// it, as the flag package does, and 1 for any other. shown is set when the
// flag package has printed it already, with the usage.
type usageError struct {
	error
	shown bool
}

func (e usageError) Unwrap() error { return e.error }

// httpGrace is how long the HTTP server may take, once the room has closed
// every WebSocket, to finish the page requests in flight. Browsers keep
// idle connections open (Chromium also opens spare ones on which no request
// ever comes), and http.Server.Shutdown waits up to 5 s for those; nothing
// is lost by closing them.
const httpGrace = time.Second

// run is the whole program: it serves the chat room on 127.0.0.1 until ctx
// ends, shuts down, and returns the exit code: 0, 2 for a bad command line,
// 1 for any other error, which it prints on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := serve(ctx, args, stdout, stderr, hooks{httpGrace: httpGrace})
	if err == nil {
		return 0
	}
	var usage usageError
	isUsage := errors.As(err, &usage)
	if !usage.shown {
		fmt.Fprintln(stderr, "chat:", err)
	}
	if isUsage {
		return 2
	}
	return 1
}

// hooks let tests watch and pace serve.
type hooks struct {
	ready     chan<- string     // if not nil, receives the URL once the server listens
	httpGrace time.Duration     // see httpGrace
	config    func(*hub.Config) // if not nil, may change the room's configuration
	room      func(*hub.Server) // if not nil, is given the room before the server listens
}

// serve is run with hooks.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, h hooks) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 8080, "port to listen on, on 127.0.0.1 only (0: any free port)")
	maxQueue := fs.Int("max-queue", 256, "messages that may wait for one client before it is disconnected")
	sendRate := fs.Float64("send-rate", 50, "messages a second sent to one client at most; the rest wait in its queue (0: no limit)")
	sendBurst := fs.Int("send-burst", 50, "messages sent to one client at once before -send-rate applies")
	verbose := fs.Bool("v", false, "log joins, leaves and slow clients")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{error: err, shown: true}
	}
	if fs.NArg() > 0 {
		return usageError{error: fmt.Errorf("unexpected argument %q (all options are flags)", fs.Arg(0))}
	}
	// 0 would silently become hub.Config's default (256), and a negative
	// value fail in seqsched with an error saying that 0 means no limit.
	if *maxQueue < 1 {
		return usageError{error: fmt.Errorf("-max-queue %d: must be at least 1", *maxQueue)}
	}
	// NaN and +Inf are refused too: "no limit" is 0.
	if !(*sendRate >= 0 && *sendRate <= math.MaxFloat64) {
		return usageError{error: fmt.Errorf("-send-rate %v: must be 0 (no limit) or more", *sendRate)}
	}
	if *sendBurst < 1 {
		return usageError{error: fmt.Errorf("-send-burst %d: must be at least 1", *sendBurst)}
	}

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg := hub.Config{
		MaxQueue:  *maxQueue,
		SendRate:  rate.Limit(*sendRate),
		SendBurst: *sendBurst,
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if h.config != nil {
		h.config(&cfg)
	}
	room, err := hub.New(cfg)
	if err != nil {
		return err
	}
	if h.room != nil {
		h.room(room)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/"
	fmt.Fprintf(stdout, "chat: open %s in two browser tabs (Ctrl-C to stop)\n", url)
	if h.ready != nil {
		h.ready <- url
	}

	metrics, err := seqprom.NewCollector(room) // the room's scheduler, read at each scrape
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	mux := http.NewServeMux()
	mux.Handle("/", room.Handler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }() // ends at srv.Shutdown below

	select {
	case err := <-served: // the listener failed: the clients still go, told why
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(err, room.Shutdown(sctx), srv.Close())
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "chat: shutting down")
	// The room first: every client is told at once and its WebSocket
	// closed (the HTTP server does not track hijacked connections, and its
	// Shutdown would first wait for the browsers' idle ones). Connections
	// that arrive meanwhile are refused by the room.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = room.Shutdown(sctx)
	gctx, gcancel := context.WithTimeout(sctx, h.httpGrace)
	defer gcancel()
	if herr := srv.Shutdown(gctx); herr != nil {
		// Only idle or stalled page connections are left: drop them.
		err = errors.Join(err, srv.Close())
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
