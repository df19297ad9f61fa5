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
	"strings"
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
	metrics   chan<- string     // if not nil, receives the metrics URL once that listener listens
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
	roomRate := fs.Float64("room-rate", 40, "chat messages a second the room accepts from all clients together, at most -send-rate (0: no limit, only without -send-rate)")
	roomBurst := fs.Int("room-burst", 100, "chat messages the room accepts at once before -room-rate applies; at most half -max-queue")
	maxConns := fs.Int("max-conns", 500, "connections served at once")
	maxConnsPerAddr := fs.Int("max-conns-per-addr", 64, "connections served at once from one IP address")
	operatorToken := fs.String("operator-token", "", `a client that sends "/op <token>" may kick anyone (default: none; only the room's first member may kick)`)
	metricsPort := fs.Int("metrics-port", 8081, "port of /metrics, on 127.0.0.1 only, apart from the page (0: any free port; -1: none)")
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
	// Every member is sent every message: the room must not accept more
	// than one member may be sent, or honest readers' queues fill.
	switch {
	case !(*roomRate >= 0 && *roomRate <= math.MaxFloat64):
		return usageError{error: fmt.Errorf("-room-rate %v: must be 0 (no limit) or more", *roomRate)}
	case *sendRate > 0 && (*roomRate == 0 || *roomRate > *sendRate):
		return usageError{error: fmt.Errorf("-room-rate %v: must be 1..-send-rate (%v), or members' queues fill", *roomRate, *sendRate)}
	case *roomBurst < 1 || *roomBurst > *maxQueue/2:
		return usageError{error: fmt.Errorf("-room-burst %d: must be 1..half -max-queue (%d), or one burst fills members' queues", *roomBurst, *maxQueue/2)}
	case *maxConns < 1:
		return usageError{error: fmt.Errorf("-max-conns %d: must be at least 1", *maxConns)}
	case *maxConnsPerAddr < 1:
		return usageError{error: fmt.Errorf("-max-conns-per-addr %d: must be at least 1", *maxConnsPerAddr)}
	case *metricsPort < -1 || *metricsPort > 65535:
		return usageError{error: fmt.Errorf("-metrics-port %d: must be -1 (none) or 0..65535", *metricsPort)}
	}
	room := rate.Limit(*roomRate)
	if room == 0 {
		room = rate.Inf
	}

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg := hub.Config{
		MaxQueue:        *maxQueue,
		SendRate:        rate.Limit(*sendRate),
		SendBurst:       *sendBurst,
		RoomRate:        room,
		RoomBurst:       *roomBurst,
		MaxConns:        *maxConns,
		MaxConnsPerAddr: *maxConnsPerAddr,
		OperatorToken:   *operatorToken,
		Logger:          slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if h.config != nil {
		h.config(&cfg)
	}
	chatRoom, err := hub.New(cfg)
	if err != nil {
		return err
	}
	if h.room != nil {
		h.room(chatRoom)
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

	srv := &http.Server{
		Handler:           onlyHosts(ln.Addr(), chatRoom.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute, // page connections browsers keep open
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }() // ends at srv.Shutdown below

	// /metrics has a listener of its own: the page's port is the one
	// people reach, and what the scheduler reports (queue lengths, waits,
	// failures) is for the operator's scraper only. Apart, it can be kept
	// off the public interface or firewalled, and a flood of page
	// requests does not delay a scrape.
	var msrv *http.Server
	mserved := make(chan error, 1)
	if *metricsPort >= 0 {
		var murl string
		if msrv, murl, err = metricsServer(chatRoom, *metricsPort, mserved); err != nil {
			return errors.Join(err, chatRoom.Shutdown(context.Background()), srv.Close())
		}
		fmt.Fprintf(stdout, "chat: metrics at %s\n", murl)
		if h.metrics != nil {
			h.metrics <- murl
		}
	}

	select {
	case err := <-served: // the listener failed: the clients still go, told why
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(err, chatRoom.Shutdown(sctx), srv.Close(), closeMetrics(msrv, mserved))
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "chat: shutting down")
	// The room first: every client is told at once and its WebSocket
	// closed (the HTTP server does not track hijacked connections, and its
	// Shutdown would first wait for the browsers' idle ones). Connections
	// that arrive meanwhile are refused by the room.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = errors.Join(chatRoom.Shutdown(sctx), closeMetrics(msrv, mserved))
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

// metricsServer serves the room's scheduler's figures at /metrics, in
// Prometheus's text format, on 127.0.0.1:port, and returns the server
// and the URL; Serve's result goes to served.
func metricsServer(room *hub.Server, port int, served chan<- error) (*http.Server, string, error) {
	metrics, err := seqprom.NewCollector(room) // the room's scheduler, read at each scrape
	if err != nil {
		return nil, "", err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: onlyHosts(ln.Addr(), mux), ReadHeaderTimeout: 10 * time.Second}
	go func() { served <- srv.Serve(ln) }() // ends at closeMetrics
	return srv, "http://" + ln.Addr().String() + "/metrics", nil
}

// closeMetrics closes the metrics server, if any, and waits for its Serve.
func closeMetrics(srv *http.Server, served <-chan error) error {
	if srv == nil {
		return nil
	}
	err := srv.Close()
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// onlyHosts serves requests whose Host header names the address the server
// listens on (127.0.0.1:port, or localhost:port), and refuses the others
// with 421 Misdirected Request. A page on another site cannot then reach
// the server through DNS rebinding: its name, made to resolve to
// 127.0.0.1, arrives as the Host, and the WebSocket library's own check
// (Origin against Host) would let it through, both being that name.
func onlyHosts(addr net.Addr, h http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(addr.String())
	allowed := map[string]bool{addr.String(): true, net.JoinHostPort("localhost", port): true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[strings.ToLower(r.Host)] {
			http.Error(w, "chat: unknown host; open the address the server printed", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
