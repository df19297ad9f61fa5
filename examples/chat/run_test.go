package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/seqsched/seqsched/examples/chat/internal/hub"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bound keeps a broken test from hanging; it is never a synchronisation.
const bound = 60 * time.Second

// server runs the program on a free port until the test ends, and returns
// its URL.
func server(t *testing.T) string {
	t.Helper()
	return startServer(t, "0", nil).url
}

// testServer is the program running in the test.
type testServer struct {
	url     string
	metrics string // the /metrics URL
	room    *hub.Server
	stop    func() // cancels the run and checks its outcome; runs once, at the latest when the test ends
}

// startServer runs the program on 127.0.0.1:port ("0": any free port),
// with the room's configuration changed by config if it is not nil.
func startServer(t *testing.T, port string, config func(*hub.Config)) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, metrics := make(chan string, 1), make(chan string, 1)
	served := make(chan error, 1)
	var out bytes.Buffer
	var room *hub.Server
	h := hooks{ready: ready, metrics: metrics, httpGrace: httpGrace, config: config, room: func(r *hub.Server) { room = r }}
	go func() {
		served <- serve(ctx, []string{"-port", port, "-metrics-port", "0"}, &out, io.Discard, h)
	}() // waited for in stop
	var url, murl string
	for url == "" || murl == "" {
		select {
		case url = <-ready:
		case murl = <-metrics:
		case err := <-served:
			cancel()
			t.Fatalf("serve -port %s: %v", port, err)
		}
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-served)
			assert.Equal(t, "chat: open "+url+" in two browser tabs (Ctrl-C to stop)\nchat: metrics at "+murl+"\nchat: shutting down\n", out.String())
		})
	}
	t.Cleanup(stop)
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)
	return &testServer{url: url, metrics: murl, room: room, stop: stop}
}

func TestServeChatsAndShutsDownCleanly(t *testing.T) {
	url := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"ws", nil)
	require.NoError(t, err)
	defer conn.CloseNow()
	require.NoError(t, conn.Write(ctx, websocket.MessageText, []byte(`{"text":"hi","ref":"m1"}`)))
	read := func() hub.Message {
		_, data, err := conn.Read(ctx)
		require.NoError(t, err)
		var m hub.Message
		require.NoError(t, json.Unmarshal(data, &m))
		return m
	}
	assert.Equal(t, hub.Message{Type: hub.KindWelcome, ID: 1, Name: "guest-1", Members: 1}, read())
	m := read()
	assert.WithinDuration(t, time.Now(), time.UnixMilli(m.At), time.Minute, "stamped with the server's clock")
	m.At = 0
	assert.Equal(t, hub.Message{Type: hub.KindChat, Seq: 1, From: "guest-1", Ref: "m1", Text: "hi"}, m)
}

// On shutdown the room tells its clients at once, before the HTTP server
// waits for the browsers' idle connections: a client hears "server
// shutting down" while an idle connection still holds the HTTP server.
func TestShutdownTellsClientsBeforeHTTPServerWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() { // waited for below
		served <- serve(ctx, []string{"-port", "0"}, io.Discard, io.Discard, hooks{ready: ready, httpGrace: bound})
	}()
	url := <-ready
	dctx, dcancel := context.WithTimeout(context.Background(), bound)
	defer dcancel()
	conn, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(url, "http")+"ws", nil)
	require.NoError(t, err)
	defer conn.CloseNow()
	var d net.Dialer
	idle, err := d.DialContext(dctx, "tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	require.NoError(t, err) // a connection on which no request comes, as Chromium opens
	defer idle.Close()
	read := func() (hub.Message, error) {
		_, data, err := conn.Read(dctx)
		var m hub.Message
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		return m, err
	}
	m, err := read()
	require.NoError(t, err)
	require.Equal(t, hub.KindWelcome, m.Type)

	cancel()
	m, err = read()
	require.NoError(t, err)
	assert.Equal(t, hub.KindNotice, m.Type)
	assert.Equal(t, "server shutting down", m.Text)
	_, err = read()
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "close: %v", err)

	// The idle connection is still open: the client was not made to wait
	// for it. (Had the server closed it, the read would return io.EOF at
	// once; an expired deadline would fail the read before looking.)
	require.NoError(t, idle.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err = idle.Read(make([]byte, 1))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "the server closed the idle connection before telling the client")
	select {
	case err := <-served:
		t.Fatalf("serve returned (%v) while a connection was open", err)
	default:
	}
	require.NoError(t, idle.Close())
	require.NoError(t, <-served)
}

// Once the room is closed, the HTTP server gets its grace to finish page
// requests, then drops the connections still open: here one whose request
// body never comes, which http.Server.Shutdown alone would wait for for ever.
func TestShutdownDropsStalledConnectionsAfterGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() { // waited for below
		served <- serve(ctx, []string{"-port", "0"}, io.Discard, io.Discard, hooks{ready: ready, httpGrace: time.Millisecond})
	}()
	url := <-ready
	var d net.Dialer
	stalled, err := d.DialContext(ctx, "tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	require.NoError(t, err)
	defer stalled.Close()
	_, err = io.WriteString(stalled, "GET / HTTP/1.1\r\nHost: chat\r\nContent-Length: 10\r\n\r\n")
	require.NoError(t, err) // the server waits for the body before it answers
	// The server accepts connections in order: once a later one is
	// answered, the stalled one has been accepted.
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	http.DefaultClient.CloseIdleConnections()

	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(bound):
		t.Fatal("serve waited for a stalled connection")
	}
	require.NoError(t, stalled.SetReadDeadline(time.Now().Add(bound)))
	_, err = io.ReadAll(stalled)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the stalled connection is still open")
}

// A bad flag is a usageError (exit code 2) that names it, before anything
// listens; -h prints the usage and exits 0, as the flag package does.
func TestBadFlag(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":       {[]string{"-nope"}, "flag provided but not defined: -nope\nUsage of chat:\n"},
		"zero max-queue":     {[]string{"-max-queue", "0"}, "chat: -max-queue 0: must be at least 1\n"},
		"negative max-queue": {[]string{"-max-queue", "-1"}, "chat: -max-queue -1: must be at least 1\n"},
		"stray argument":     {[]string{"extra"}, "chat: unexpected argument \"extra\" (all options are flags)\n"},
		"negative send-rate": {[]string{"-send-rate", "-1"}, "chat: -send-rate -1: must be 0 (no limit) or more\n"},
		"NaN send-rate":      {[]string{"-send-rate", "NaN"}, "chat: -send-rate NaN: must be 0 (no limit) or more\n"},
		"zero send-burst":    {[]string{"-send-burst", "0"}, "chat: -send-burst 0: must be at least 1\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Were the flags accepted, the run would stop at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var out, errOut bytes.Buffer
			assert.Equal(t, 2, run(ctx, append([]string{"-port", "0"}, tc.args...), &out, &errOut))
			assert.True(t, strings.HasPrefix(errOut.String(), tc.want), "stderr:\n%s", errOut.String())
			assert.Equal(t, 1, strings.Count(errOut.String(), strings.SplitN(tc.want, "\n", 2)[0]), "said once:\n%s", errOut.String())
			assert.Empty(t, out.String(), "nothing listened")
		})
	}
	t.Run("help", func(t *testing.T) {
		var out, errOut bytes.Buffer
		assert.Equal(t, 0, run(context.Background(), []string{"-h"}, &out, &errOut))
		assert.Contains(t, errOut.String(), "Usage of chat:")
		assert.Empty(t, out.String())
	})
}

// A run that cannot listen exits 1 and says why, once.
func TestRunExitsOneOnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	var out, errOut bytes.Buffer
	assert.Equal(t, 1, run(context.Background(), []string{"-port", port}, &out, &errOut))
	assert.Regexp(t, `^chat: listen tcp 127\.0\.0\.1:\d+: bind: address already in use\n$`, errOut.String())
}

// /metrics serves the room's scheduler's figures in Prometheus's text
// format, on a listener of its own, not next to the page; the exact counts
// are prom's tests' business.
func TestMetricsServedOnTheirOwnListener(t *testing.T) {
	srv := startServer(t, "0", nil)
	url := srv.url
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"ws", nil)
	require.NoError(t, err)
	defer conn.CloseNow()
	require.NoError(t, conn.Write(ctx, websocket.MessageText, []byte(`{"text":"hi","ref":"m1"}`)))
	for range 2 { // the welcome and the message: tasks of the room's scheduler
		_, _, err := conn.Read(ctx)
		require.NoError(t, err)
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: bound}
	resp, err := client.Get(url + "metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "/metrics on the page's port")

	require.NotEqual(t, strings.TrimSuffix(url, "/"), strings.TrimSuffix(srv.metrics, "/metrics"))
	resp, err = client.Get(srv.metrics)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), resp.Header.Get("Content-Type"))
	for _, line := range []string{
		`seqsched_task_wait_seconds_bucket{priority="normal",le="1e-06"} `,
		`seqsched_task_wait_seconds_bucket{priority="high",le="+Inf"} `,
		`seqsched_task_run_seconds_count{priority="normal"} `,
		`seqsched_tasks_total{outcome="succeeded",priority="normal"} `,
		`seqsched_queued{priority="high"} `,
		"seqsched_sessions ",
	} {
		assert.Contains(t, string(body), "\n"+line)
	}
}
