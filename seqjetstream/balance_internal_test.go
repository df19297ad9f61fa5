package seqjetstream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The guarantee of readClaims: a heartbeat reads every live member's
// claim, whatever the others renew meanwhile. (A key-value watcher's
// initial values left out a live member's key in about one read in ten
// while the members renewed theirs: the reader took its partitions.)
func TestReadClaimsSeesEveryMemberWhileTheyRenew(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "owners", TTL: 3 * time.Second, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	stream, err := js.Stream(ctx, "KV_owners")
	require.NoError(t, err)

	const members = 4
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range members {
		key := fmt.Sprint("m", i)
		_, err := kv.Put(ctx, key, []byte(`["S.part-0"]`))
		require.NoError(t, err)
		wg.Add(1)
		go func() { // renews its key every millisecond: a rhythm, not a synchronisation
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = kv.Put(ctx, key, []byte(`["S.part-0"]`))
				time.Sleep(time.Millisecond)
			}
		}()
	}
	_, err = kv.Put(ctx, "gone", []byte(`[]`))
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctx, "gone"))

	b := &balancer{js: js, bucket: "owners", kv: kv, stream: stream}
	for r := range 150 {
		claims, err := b.readClaims(ctx)
		require.NoError(t, err)
		require.Len(t, claims, members, "read %d: claims %v; want every member's, and no deleted key's", r, claims)
	}
}
