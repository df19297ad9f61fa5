package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
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
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	served := make(chan error, 1)
	var out bytes.Buffer
	go func() { served <- serve(ctx, []string{"-port", "0"}, &out, io.Discard, ready) }() // waited for in Cleanup
	url := <-ready
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
		assert.Equal(t, "chat: open "+url+" in two browser tabs (Ctrl-C to stop)\nchat: shutting down\n", out.String())
	})
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)
	return url
}

func TestServeChatsAndShutsDownCleanly(t *testing.T) {
	url := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"ws", nil)
	require.NoError(t, err)
	defer conn.CloseNow()
	require.NoError(t, conn.Write(ctx, websocket.MessageText, []byte(`{"text":"hi"}`)))
	read := func() hub.Message {
		_, data, err := conn.Read(ctx)
		require.NoError(t, err)
		var m hub.Message
		require.NoError(t, json.Unmarshal(data, &m))
		return m
	}
	assert.Equal(t, hub.Message{Type: hub.KindWelcome, ID: 1, Name: "guest-1"}, read())
	assert.Equal(t, hub.Message{Type: hub.KindChat, Seq: 1, From: "guest-1", Text: "hi"}, read())
}

// A bad flag is a usageError (exit code 2) that names it, before anything
// listens.
func TestBadFlag(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":       {[]string{"-nope"}, "flag provided but not defined: -nope"},
		"zero max-queue":     {[]string{"-max-queue", "0"}, "-max-queue 0: must be at least 1"},
		"negative max-queue": {[]string{"-max-queue", "-1"}, "-max-queue -1: must be at least 1"},
		"stray argument":     {[]string{"extra"}, `unexpected argument "extra" (all options are flags)`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Were the flags accepted, the run would stop at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var out, errOut bytes.Buffer
			err := run(ctx, append([]string{"-port", "0"}, tc.args...), &out, &errOut)
			assert.ErrorContains(t, err, tc.want)
			assert.ErrorAs(t, err, new(usageError))
			assert.Empty(t, out.String(), "nothing listened")
		})
	}
}
