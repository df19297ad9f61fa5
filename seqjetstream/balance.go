package seqjetstream

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Balancing (WithBalance). Left alone, the server pins each partition to
// whichever instance pulls first, so one instance may own them all. With a
// membership bucket, every instance running the Consumer heartbeats its
// own key in a JetStream key-value bucket whose TTL (MaxAge) removes the
// key of an instance that stops. The key's value is the instance's claim:
// the partitions assigned to it. Each heartbeat reads every member's
// claim, and every instance computes the same assignment from them
// (assign, in assign.go): sticky, so that a member keeps what it claims up
// to its share, and balanced, so that no member has more than one
// partition above another. A join moves at most the joiner's share (⌈P/n⌉
// partitions), a leave only the leaver's. An instance pulls only for the
// partitions assigned to it; one that owns a partition assigned elsewhere
// steps down (stepDown, in stepdown.go): it gives back what has not
// started, lets what runs finish, ends the epoch (as when a pin is lost)
// and unpins the partition, so that the assignee's pull is pinned at once,
// and catches up (key order holds across the move). While the views of the
// members differ, two instances may pull for one partition (the server
// pins one) or none (until the next heartbeat).
//
// An instance that dies stops heartbeating: its key goes after the
// bucket's TTL, and its partitions go to the others, whose pulls the
// server pins once the dead owner's pin lapses, PinnedTTL after its last
// pull. The TTL must therefore be at most every pinned consumer's
// PinnedTTL (checked by Run), so that a partition moves within PinnedTTL
// and the catch-up's AckWait, as without balancing.
//
// Membership is never load-bearing for liveness. Once it has been
// unavailable for the bucket's TTL (the server restarts, the bucket was
// deleted, heartbeats fail; before that, the last assignment stands, as
// the others' does), every partition counts as assigned here: the instance pulls for all of them,
// as without WithBalance, so the server keeps each pinned to the one
// instance that holds it and moves a dead owner's partitions to a
// survivor after PinnedTTL. A missing bucket is created again, with the
// configuration it had (or, never seen, file storage and the smallest
// PinnedTTL as its TTL), so that membership comes back after a restart
// of a server that kept it in memory. Once a heartbeat succeeds again
// (after a bucket made again, and after membership was away, only once a
// TTL has passed, for every live member to renew its key: see
// settleUntil), the claims, including the partitions this instance took
// over meanwhile, are balanced again, with the same few moves.

// balancer is a Consumer's membership (see above). Its state is Run's:
// join and then the heartbeat goroutine use it, one at a time.
type balancer struct {
	c      *Consumer
	js     jetstream.JetStream
	bucket string
	id     string       // this instance's key in the bucket
	parts  []*partition // the pinned partitions, by stream and name
	names  []string     // their names in claims: "<stream>.<consumer>"
	opt    string       // the option, as written, for errors

	kv     jetstream.KeyValue       // nil until bound, and after a failure
	stream jetstream.Stream         // the bucket's stream, bound with kv
	kvCfg  jetstream.KeyValueConfig // to create the bucket when it is missing
	every  time.Duration            // the heartbeat's period: a third of the bucket's TTL

	claims   []bool    // per part: this instance's claim, put at each heartbeat
	lastPut  time.Time // when this instance's key was last renewed; zero before
	rev      uint64    // the revision of that renewal; 0 before, and after leave
	made     time.Time // when the bucket bound was made: another is a new bucket
	degraded bool      // membership unavailable: every partition pulled for (see above)
	// settleUntil is, after the bucket was made again or membership came
	// back, when the members that are alive have all renewed their keys:
	// until then heartbeats only renew, and the last assignment stands,
	// lest the first to come back take every partition.
	settleUntil time.Time
}

// errSettling is a heartbeat's answer before settleUntil: neither a
// failure nor an assignment.
var errSettling = errors.New("seqjetstream: membership settling")

func newBalancer(js jetstream.JetStream, bucket string, parts []*partition) *balancer {
	b := &balancer{js: js, bucket: bucket, id: rand.Text(), opt: fmt.Sprintf("WithBalance(js, %q)", bucket)}
	for _, p := range parts {
		b.c = p.c
		if p.group != "" {
			b.parts = append(b.parts, p)
		}
	}
	slices.SortFunc(b.parts, func(x, y *partition) int {
		return cmp.Or(cmp.Compare(x.stream, y.stream), cmp.Compare(x.name, y.name))
	})
	ttl := time.Duration(0)
	for _, p := range b.parts {
		b.names = append(b.names, p.stream+"."+p.name)
		if t := p.cons.CachedInfo().Config.PinnedTTL; ttl == 0 || (t > 0 && t < ttl) {
			ttl = t
		}
	}
	b.claims = make([]bool, len(b.parts))
	b.kvCfg = jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage,
		Description: "seqjetstream WithBalance membership"}
	b.every = max(ttl/3, 100*time.Millisecond)
	b.kvCfg.TTL = max(ttl, 300*time.Millisecond)
	return b
}

// join binds the bucket (creating it when missing), checks its TTL,
// makes this instance a member and assigns the partitions, before Run's
// first pull. It fails only for a bucket whose TTL does not fit (an
// *OptionError): when membership is unavailable it logs why and leaves
// every partition assigned here; the heartbeat goroutine retries.
func (b *balancer) join(ctx context.Context) error {
	err := b.renew(ctx)
	var oe *OptionError
	if errors.As(err, &oe) {
		return err
	}
	if err != nil && !errors.Is(err, errSettling) && ctx.Err() == nil {
		b.fallBack(err)
	}
	return nil
}

// loop heartbeats every b.every until ctx ends, then leaves the bucket.
// It is one of Run's goroutines; should the logger end it with
// runtime.Goexit, a fresh one carries on.
func (b *balancer) loop(ctx context.Context, c *Consumer, wg *sync.WaitGroup) {
	defer wg.Done()
	normal := false
	defer func() {
		if !normal {
			wg.Add(1)
			go b.loop(ctx, c, wg)
		}
	}()
	t := time.NewTimer(b.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			b.leave()
			normal = true
			return
		case <-t.C:
		}
		// Up to half the TTL: a slow server delays the next heartbeat,
		// never past the TTL.
		began := time.Now()
		bctx, cancel := context.WithTimeout(ctx, b.kvCfg.TTL/2)
		err := b.renew(bctx)
		cancel()
		switch {
		case ctx.Err() != nil, errors.Is(err, errSettling):
		case err != nil:
			if time.Since(b.lastPut) >= b.kvCfg.TTL {
				b.fallBack(err)
			}
		case b.degraded:
			b.degraded = false
			c.logAt(c.life, levelWarn, "seqjetstream: membership is back; partitions are shared out again",
				"bucket", b.bucket, "member", b.id)
		}
		// At a fixed rate: a slow heartbeat does not push the next one,
		// which renews the key first, further towards the TTL.
		t.Reset(max(0, b.every-time.Since(began)))
	}
}

// renew binds the bucket if it is not bound, then heartbeats. After a
// failure the bucket is bound again at the next heartbeat: it may have
// been deleted, or the server restarted without it.
func (b *balancer) renew(ctx context.Context) error {
	if b.kv == nil {
		created, err := b.bind(ctx)
		if err != nil {
			return err
		}
		if created || b.degraded {
			b.settleUntil = time.Now().Add(b.kvCfg.TTL)
		}
	}
	renewed, err := b.beat(ctx)
	if err != nil {
		if errors.Is(err, errSettling) {
			return err
		}
		if !renewed {
			// The key could not be renewed: bind again. A heartbeat that
			// renewed it and then ran out of time keeps the binding, so
			// that the next renewal is not delayed by binding again.
			b.kv = nil
		}
		return fmt.Errorf("seqjetstream: %s: %w", b.opt, err)
	}
	return nil
}

// bind binds the bucket, creating it when it is missing (created), and
// checks its TTL. Its errors wrap the server's, or are an *OptionError
// for a bucket whose TTL does not fit.
func (b *balancer) bind(ctx context.Context) (created bool, err error) {
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = b.js.CreateKeyValue(ctx, b.kvCfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // another member made it first
			kv, err = b.js.KeyValue(ctx, b.bucket)
		} else if err == nil {
			created = true
			b.c.logAt(b.c.life, levelWarn, "seqjetstream: membership bucket missing; created it",
				"bucket", b.bucket, "ttl", b.kvCfg.TTL, "storage", b.kvCfg.Storage.String())
		}
	}
	if err != nil {
		return false, fmt.Errorf("seqjetstream: %s: %w", b.opt, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return false, fmt.Errorf("seqjetstream: %s: %w", b.opt, err)
	}
	ttl := st.TTL()
	if ttl <= 0 {
		return false, &OptionError{Option: b.opt, Reason: "the bucket has no TTL: a dead instance would keep its partitions for ever"}
	}
	for _, p := range b.parts {
		if pttl := p.cons.CachedInfo().Config.PinnedTTL; ttl > pttl {
			return false, &OptionError{Option: b.opt, Reason: fmt.Sprintf("the bucket's TTL %v is above the PinnedTTL %v of consumer %s/%s: a dead instance's partition would move after the TTL, not the PinnedTTL", ttl, pttl, p.stream, p.name)}
		}
	}
	// Remember it as it is, to make it again the same way if it goes.
	b.kvCfg.TTL = ttl
	made := time.Time{}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		if si := bs.StreamInfo(); si != nil {
			b.kvCfg.Storage, b.kvCfg.Replicas = si.Config.Storage, si.Config.Replicas
			b.kvCfg.Description = si.Config.Description
			made = si.Created
		}
	}
	if made.IsZero() || !made.Equal(b.made) {
		// A bucket made again holds no key of this instance: the next
		// renewal puts it afresh, with its claim (see renewKey).
		b.rev = 0
	}
	b.made = made
	stream, err := b.js.Stream(ctx, "KV_"+b.bucket)
	if err != nil {
		return false, fmt.Errorf("seqjetstream: %s: %w", b.opt, err)
	}
	b.kv, b.stream, b.every = kv, stream, ttl/3
	return created, nil
}

// beat renews this instance's key with its claim, reads every member's
// claim, assigns the partitions, and puts its new claim if it changed.
// The assignment applies only once that claim is put: an instance that
// others cannot see as a member takes nothing from them. It reports
// whether the key was renewed, even when it fails after that.
func (b *balancer) beat(ctx context.Context) (renewed bool, err error) {
	if b.degraded || time.Now().Before(b.settleUntil) {
		// Keep what this instance took over while membership was away
		// (see above), so that balancing it moves no more than needed.
		for i, p := range b.parts {
			p.mu.Lock()
			b.claims[i] = b.claims[i] || p.owned
			p.mu.Unlock()
		}
		if err := b.put(ctx); err != nil {
			return false, err
		}
	} else if err := b.renewKey(ctx); err != nil {
		return false, err
	}
	if time.Now().Before(b.settleUntil) {
		return true, errSettling
	}
	claims, err := b.readClaims(ctx)
	if err != nil {
		return true, err
	}
	claims[b.id] = b.claimed()
	owner := assign(b.names, claims)
	changed := false
	for i, m := range owner {
		if mine := m == b.id; mine != b.claims[i] {
			b.claims[i], changed = mine, true
		}
	}
	if changed {
		if err := b.put(ctx); err != nil {
			return true, err
		}
	}
	for i, p := range b.parts {
		p.setAssigned(b.claims[i])
	}
	return true, nil
}

// readClaims returns every member's claim, by key. It asks the server
// which keys the bucket holds, then reads each, rather than reading a
// watcher's initial values: a watcher ends those after as many
// deliveries as the bucket had values when it began, and the others'
// heartbeats, renewing their keys meanwhile, count towards them, so a
// live member could be missing from the list (and its partitions taken).
// A key deleted or gone meanwhile is no member's.
func (b *balancer) readClaims(ctx context.Context) (map[string][]string, error) {
	prefix := "$KV." + b.bucket + "."
	si, err := b.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	claims := make(map[string][]string, len(si.State.Subjects))
	for subj := range si.State.Subjects {
		key := strings.TrimPrefix(subj, prefix)
		e, err := b.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		_ = json.Unmarshal(e.Value(), &names) // a value not ours claims nothing
		claims[key] = names
	}
	return claims, nil
}

// renewKey renews this instance's key with its claim, if the key is
// still there: the server, not this instance's clock, tells whether it
// expired. Its heartbeats may have been late (a loaded process), but if
// the bucket still holds the key at the revision last put, no member can
// have seen it missing, and the claim stands. If the key expired (the
// process stalled past the TTL, say), the others may have shared its
// partitions out meanwhile: it comes back as a joiner, taking its share
// from them, not its old claim (logged at Warn). Only when the last
// write's outcome is unknown (it failed on its way) or the bucket is new
// does it go by its own clock: the key expired if it was renewed a TTL
// ago or more.
func (b *balancer) renewKey(ctx context.Context) error {
	var expired bool
	if b.rev != 0 {
		v, _ := json.Marshal(b.claimed()) // a []string always marshals
		rev, err := b.kv.Update(ctx, b.id, v, b.rev)
		switch {
		case err == nil:
			b.rev, b.lastPut = rev, time.Now()
			return nil
		case !errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			b.rev = 0 // it may have been written nonetheless
			return err
		}
		expired = true
	} else {
		expired = !b.lastPut.IsZero() && time.Since(b.lastPut) >= b.kvCfg.TTL
	}
	late := time.Since(b.lastPut)
	if expired {
		clear(b.claims)
	}
	if err := b.put(ctx); err != nil {
		return err
	}
	if expired {
		b.c.logAt(b.c.life, levelWarn, "seqjetstream: this instance's membership key was gone (its heartbeats stalled past the bucket's TTL, or it was deleted); it joins again, and its partitions may move",
			"bucket", b.bucket, "member", b.id, "since_renewed", late.Round(time.Millisecond), "ttl", b.kvCfg.TTL)
	}
	return nil
}

// put renews this instance's key with its claim, whatever the key holds.
func (b *balancer) put(ctx context.Context) error {
	v, _ := json.Marshal(b.claimed()) // a []string always marshals
	rev, err := b.kv.Put(ctx, b.id, v)
	if err != nil {
		b.rev = 0 // it may have been written nonetheless
		return err
	}
	b.rev, b.lastPut = rev, time.Now()
	return nil
}

// claimed returns the names of the partitions this instance claims.
func (b *balancer) claimed() []string {
	names := []string{}
	for i, ok := range b.claims {
		if ok {
			names = append(names, b.names[i])
		}
	}
	return names
}

// fallBack makes membership unavailable: every partition is assigned
// here until a heartbeat succeeds again (see above). It logs the first
// failure of a run of them.
func (b *balancer) fallBack(err error) {
	for i, p := range b.parts {
		p.mu.Lock()
		b.claims[i] = b.claims[i] || p.owned
		p.mu.Unlock()
		p.setAssigned(true)
	}
	if b.degraded {
		return
	}
	b.degraded = true
	b.c.logAt(b.c.life, levelWarn, "seqjetstream: membership unavailable; pulling for every partition until it is back (the server pins each to one instance, and moves a dead one's after PinnedTTL)",
		"bucket", b.bucket, "member", b.id, "err", err)
}

// leave deletes this instance's key, so that the others share out its
// partitions at their next heartbeat rather than after the TTL, and
// forgets its claim. It waits at most handoverWait.
func (b *balancer) leave() {
	// A later Run joins afresh: the others take these partitions now.
	clear(b.claims)
	b.lastPut, b.rev, b.settleUntil, b.degraded = time.Time{}, 0, time.Time{}, false
	if b.kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handoverWait)
	defer cancel()
	_ = b.kv.Delete(ctx, b.id)
}
