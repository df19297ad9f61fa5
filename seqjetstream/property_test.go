package seqjetstream_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seqsched/seqsched/seqjetstream"
)

// The property tests below are seeded: a seed picks the keys published
// and the rhythm of the stalls, so which partitions the kills hit. Timing
// (the handlers, the server's redeliveries, the load of the machine)
// still varies from run to run, so a seed that failed once may pass its
// replay; it is kept in regressions anyway, and runs every time.
//
// Each property runs its regression seeds and -seeds random ones (the
// environment's SEQJETSTREAM_SEEDS, else 1); -seed N (or
// SEQJETSTREAM_SEED) runs seed N alone. A failure prints its replay
// command. soak.sh runs many seeds of every property.
var (
	seedFlag  = flag.Uint64("seed", envUint("SEQJETSTREAM_SEED", 0), "run the property tests with this seed alone (0: their regression seeds and -seeds random ones)")
	seedsFlag = flag.Uint64("seeds", envUint("SEQJETSTREAM_SEEDS", 1), "random seeds each property test runs, besides its regression seeds")
)

// regressions are, per property test, the seeds that ever failed it.
// Add a failing seed here, with what it found, before fixing the cause.
var regressions = map[string][]uint64{
	// A pull's ctx ended 17ms after the server's expiry: on a loaded
	// machine nats.go dropped deliveries still on their way, and their
	// redeliveries, until the catch-up was given up (order lost).
	"TestPartitionedInstancesKilledAndRestartedLoseNothingAndKeepOrder": {1795868293797196056,
		// On a machine so loaded (load 26 on 2 cores) that the run took
		// 86s instead of 5 and goroutines stalled for seconds, past
		// PinnedTTL: catch-ups given up, one key out of order.
		17154755016744594561,
		// Soak at load 7 of a version whose catch-ups kept what they
		// held across a start-over and pulled for MaxAckPending (branch
		// js45s, reverted): a catch-up given up with 1 missing and 56
		// held ran k29's later messages before 1469.
		10908316459584234735},
	// Catch-ups given up while the owner's answers were withheld and
	// their redeliveries came late again: the owner counted those
	// messages missing though it had handled them.
	"TestPartitionedInstancesThatStallLoseNothingAndKeepOrder": {4458319739642440505, 3357526425561296203,
		// A catch-up given up with 8 missing ran later messages of
		// their keys first: a catch-up that could not finish ran what
		// it held while a real message was still out (in a replay, one
		// a gracefully closed owner gave back, at the ack floor, seen
		// by no one for 2.5s while the partition was at its
		// MaxAckPending: replays of its kind show such messages
		// delivered and dropped by a starved client's pull, see the
		// reliability log). Now such a catch-up starts over instead.
		4299379293366551939,
		// Catch-ups given up the same way (the first with the code of
		// issue 45 item 1; the others with a version that pulled singly
		// through every catch-up, too slowly for a full MaxAckPending).
		4283503708537635123, 6161044818295493003, 10177929763819310349,
		// A catch-up given up with 1 missing, taken for a stored status
		// message: a delivery lost behind a pull that its backstop ended
		// (load 21) was counted as dropped by nats.go.
		5161061717832809707,
		// In a soak at load 25-35 (a 32s run; its replays take 7-10s
		// and pass): one owner, with no catch-up given up or started
		// over and no partition lost logged, applied k32@2962 before
		// k32@2955 while its answers were being withheld: a catch-up
		// counted as its own a message whose Ack, sent in its window,
		// had reached the server after its redelivery (see
		// TestOwnAnswerThatArrivedLateIsNotCountedByALaterCatchUp), and
		// ended with 2955 still out.
		8822355697788827053,
		// In a soak at load 28-30: after a SIGKILL the survivors'
		// catch-ups started over every bound for 30s and the partitions
		// made no progress (with 10177929763819310349 above, in the same
		// run). Order held.
		9174156862447694611,
		// In a soak of branch js45l at load 11-23 (eight CPU hogs): 90ms
		// after another instance's graceful Close, instance 4 took a 423
		// for a stored status message on two partitions (pinForgotten),
		// then applied k24@1541 before k24@1508 and k34@1528 before
		// k34@1522. Read from the log and the server: the closing
		// instance drained past PinnedTTL, the server pinned instance 4's
		// pull (sent without a pin) and delivered to it, and the Close's
		// unpin took that pin; the server answered the waiting pull with
		// a 423 and pinned instance 1's. Instance 4 took the 423 for a
		// stored one (its pull carried no pin), went on under instance
		// 1's pin, unpinned it (instance 1 lost the partition, 13 held),
		// and its next catch-up ended one short. Fixed: see
		// TestServers423ToAPullSentWithoutAPinEndsTheEpoch and
		// TestCloseDoesNotUnpinAPinItLostMeanwhile.
		2823274999529456777,
		// A soak of main at fa8f6db starved on purpose: the soak at nice
		// 5 against 16 CPU hogs at nice 0 (load average 24), runs 25-60
		// times their unloaded length, pins passing PinnedTTL between
		// instances. These runs timed out on the test's 20s waits and
		// nats.go's publish timeout, with partitions moving between
		// instances faster than their catch-ups ended; no order broken,
		// nothing lost (see the reliability log).
		2967834205635022905, 13395084248647563997, 9981085472446490507},
	// A catch-up given up with 37 messages missing.
	"TestBalancedInstancesThatStallLoseNothingKeepOrderAndShareEvenly": {3034307000158103757,
		// The same soak, the same shape: one owner, with nothing
		// logged but withheld answers, applied k38@2019 before k38@1979
		// 1.2s after the previous owner's graceful Close. The likeliest
		// cause (the log cannot prove it): Close unpinned before its
		// handlers finished, and an Ack of the old owner that landed late
		// took off the server's count a message the new owner held in
		// its catch-up (see TestHandoverOnCloseUnpinsOnlyOnceNothingMoreIsSent).
		9220102002355871535,
		// Timed out in the starved soak of fa8f6db (see
		// TestPartitionedInstancesThatStallLoseNothingAndKeepOrder's
		// list): order held, nothing lost.
		2592278249238962283, 6439495910200052037, 17353150104591591101,
		2792319219401809249, 6704472002692201969, 8405772285858454497},
	"TestBalancedInstancesJoiningLeavingAndKilledLoseNothingKeepOrderAndShareEvenly": {
		// Timed out in the starved soak of fa8f6db (see
		// TestPartitionedInstancesThatStallLoseNothingAndKeepOrder's
		// list): order held, nothing lost.
		17688133687086733325, 904789583838568127, 13365325968918036937},
}

func envUint(name string, def uint64) uint64 {
	v, err := strconv.ParseUint(os.Getenv(name), 10, 64)
	if err != nil {
		return def
	}
	return v
}

// forEachSeed runs property once per seed (see above), each as a subtest
// named after its seed; a failed one logs how to replay it.
func forEachSeed(t *testing.T, property func(t *testing.T, seed uint64)) {
	seeds := []uint64{*seedFlag}
	if *seedFlag == 0 {
		seeds = append([]uint64(nil), regressions[t.Name()]...)
		for range *seedsFlag {
			seeds = append(seeds, rand.Uint64()|1)
		}
	}
	name := t.Name()
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d failed; replay it from the repository's root with\n\t(cd seqjetstream && go test -race -run '^%s$' -seed %d .)\nand add it to regressions in property_test.go", seed, name, seed)
				}
			})
			property(t, seed)
		})
	}
}

// world is the property test's view of everything that happened: each
// key's stream sequences as published, each application with the instance
// that made it, and every acknowledgement. Its checks are made as things
// happen, under one lock.
type world struct {
	mu         sync.Mutex
	published  map[string][]uint64        // key → sequences, ascending
	applied    map[string]map[uint64]bool // key → sequences applied by anyone
	appliedBy  map[int]map[uint64]bool    // instance → sequences it applied
	dead       map[int]bool               // instances killed: they apply nothing more
	closed     map[int]bool               // instances whose Close returned: they ack nothing more
	violations []string                   // order broken, or acked before applied
	applies    int                        // applications, duplicates included
	acks       int
	journal    []string // the instances' log records and each key's applications, for a failure's report
	restarts   int      // catch-ups started over (logged at the end)
	began      time.Time
}

func newWorld() *world {
	return &world{
		published: make(map[string][]uint64),
		applied:   make(map[string]map[uint64]bool), appliedBy: make(map[int]map[uint64]bool),
		dead: make(map[int]bool), closed: make(map[int]bool), began: time.Now(),
	}
}

func (w *world) publishedAs(key string, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.published[key] = append(w.published[key], seq)
}

// apply is the handler's effect. A dead instance applies nothing (as a
// crashed process would not); it fails the attempt instead. Applying seq
// of key requires every earlier sequence of key to be applied already:
// per-key order across instances, kills and redeliveries.
func (w *world) apply(inst int, key string, seq uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead[inst] {
		return fmt.Errorf("instance %d is dead", inst)
	}
	for _, s := range w.published[key] {
		if s >= seq {
			break
		}
		if !w.applied[key][s] {
			w.violations = append(w.violations, fmt.Sprintf("instance %d applied %s@%d before %d", inst, key, seq, s))
			break
		}
	}
	if w.applied[key] == nil {
		w.applied[key] = make(map[uint64]bool)
	}
	if w.appliedBy[inst] == nil {
		w.appliedBy[inst] = make(map[uint64]bool)
	}
	w.applied[key][seq] = true
	w.appliedBy[inst][seq] = true
	w.notef("instance %d applied %s@%d", inst, key, seq)
	w.applies++
	return nil
}

// notef adds a line to the journal. Called with mu held.
func (w *world) notef(format string, args ...any) {
	w.journal = append(w.journal, fmt.Sprintf("%8.3fs ", time.Since(w.began).Seconds())+fmt.Sprintf(format, args...))
}

// report logs the journal: the instances' log records, their starts and
// stops, and the applications of each key an order violation names.
func (w *world) report(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make(map[string]bool)
	for _, v := range w.violations {
		if _, after, ok := strings.Cut(v, " applied "); ok {
			key, _, _ := strings.Cut(after, "@")
			keys[key] = true
		}
	}
	for _, l := range w.journal {
		_, after, applied := strings.Cut(l, " applied ")
		key, _, _ := strings.Cut(after, "@")
		if !applied || keys[key] {
			t.Log(l)
		}
	}
}

// journalHandler is a slog handler that writes an instance's records to
// the world's journal.
type journalHandler struct {
	w    *world
	inst int
}

func (h journalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h journalHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.w.notef("instance %d %s %s%s", h.inst, r.Level, r.Message, b.String())
	if strings.HasPrefix(r.Message, "seqjetstream: catch-up started over") {
		h.w.restarts++
	}
	if strings.HasPrefix(r.Message, "seqjetstream: catch-up given up") {
		// No stored status message is published here, so nothing is
		// out of every instance's reach: a catch-up given up ran
		// messages while earlier ones were out, which costs order
		// whenever one of them shares a key with what ran. (One that
		// cannot finish starts over instead, and is counted.)
		h.w.violations = append(h.w.violations, fmt.Sprintf("instance %d gave a catch-up up:%s", h.inst, b.String()))
	}
	return nil
}
func (h journalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h journalHandler) WithGroup(string) slog.Handler      { return h }

// acked checks an acknowledgement: an instance acks only what it applied,
// and nothing once its Close has returned.
func (w *world) acked(inst int, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acks++
	if !w.appliedBy[inst][seq] {
		w.violations = append(w.violations, fmt.Sprintf("instance %d acked %d, which it never applied", inst, seq))
	}
	if w.closed[inst] {
		w.violations = append(w.violations, fmt.Sprintf("instance %d acked %d after its Close returned", inst, seq))
	}
}

// closedDown records that inst's Close returned.
func (w *world) closedDown(inst int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed[inst] = true
}

func (w *world) kill(inst int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dead[inst] = true
}

func (w *world) appliedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.applied {
		n += len(m)
	}
	return n
}

// instance is one consumer process: its own connection, its own Consumer
// of every partition.
type instance struct {
	id  int
	nc  *nats.Conn
	c   *seqjetstream.Consumer
	run *running
}

func TestPartitionedInstancesKilledAndRestartedLoseNothingAndKeepOrder(t *testing.T) {
	forEachSeed(t, func(t *testing.T, seed uint64) { partitionedProperty(t, seed, false, false) })
}

// The same with WithBalance: after each instance joins, leaves or is
// killed, and at the end, once ownership settles no live instance owns
// more than one partition above another.
func TestBalancedInstancesJoiningLeavingAndKilledLoseNothingKeepOrderAndShareEvenly(t *testing.T) {
	forEachSeed(t, func(t *testing.T, seed uint64) { partitionedProperty(t, seed, false, true) })
}

// The same, with every instance stalling now and then: the package's clock
// jumps 600ms forward every 100–400ms, as if the instances had not run
// meanwhile (the server's clock does not jump). Held messages then pass
// their answer window: their answers are withheld, and they come back.
func TestPartitionedInstancesThatStallLoseNothingAndKeepOrder(t *testing.T) {
	forEachSeed(t, func(t *testing.T, seed uint64) { partitionedProperty(t, seed, true, false) })
}

// The same with WithBalance.
func TestBalancedInstancesThatStallLoseNothingKeepOrderAndShareEvenly(t *testing.T) {
	forEachSeed(t, func(t *testing.T, seed uint64) { partitionedProperty(t, seed, true, true) })
}

func partitionedProperty(t *testing.T, seed uint64, stalls, balance bool) {
	const (
		partitions = 4
		keys       = 40
		total      = 3000
		instances  = 3
		kills      = 3
	)
	rng := rand.New(rand.NewPCG(seed, 1))

	url := startServer(t)
	_, js := connect(t, url)
	stream := newStream(t, js, jetstream.StreamConfig{
		Name:     "P",
		Subjects: []string{"in.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source: "in.*", Destination: fmt.Sprintf("p.{{partition(%d,1)}}.{{wildcard(1)}}", partitions),
		},
	})
	for p := range partitions {
		newConsumer(t, stream, jetstream.ConsumerConfig{
			Durable:        fmt.Sprintf("part-%d", p),
			FilterSubject:  fmt.Sprintf("p.%d.*", p),
			AckWait:        500 * time.Millisecond,
			MaxAckPending:  100,
			PriorityPolicy: jetstream.PriorityPolicyPinned,
			PriorityGroups: []string{"owners"},
			PinnedTTL:      time.Second,
		})
	}
	if balance {
		_, err := js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{
			Bucket: "members", TTL: time.Second, Storage: jetstream.MemoryStorage,
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.report(t)
		}
	})
	var mu sync.Mutex // guards live
	live := make(map[int]*instance)
	next := 0
	launch := func() {
		next++
		id := next
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		ijs, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		var cons []jetstream.Consumer
		for p := range partitions {
			cn, err := ijs.Consumer(context.Background(), "P", fmt.Sprintf("part-%d", p))
			if err != nil {
				t.Fatal(err)
			}
			cons = append(cons, wrapConsumer{cn, func(m jetstream.Msg) jetstream.Msg {
				seq := seqOf(t, m)
				return hookMsg{Msg: m, onAck: func() bool { w.acked(id, seq); return true }}
			}})
		}
		opts := []seqjetstream.Option{seqjetstream.WithMaxBuffered(100), seqjetstream.WithRetries(1000, func(context.Context, jetstream.Msg, int, error) time.Duration {
			return 20 * time.Millisecond
		}), seqjetstream.WithHandover(ijs), seqjetstream.WithLogger(slog.New(journalHandler{w, id}))}
		if balance {
			opts = append(opts, seqjetstream.WithBalance(ijs, "members"))
		}
		c, err := seqjetstream.NewConsumer(cons, func(ctx context.Context, m jetstream.Msg) error {
			seq := seqOf(t, m)
			if d := rng2(seq); d > 0 {
				time.Sleep(d) // the work: up to 2ms, so that keys queue
			}
			if seq%13 == 0 && seqjetstream.Attempt(ctx) == 1 {
				return errors.New("transient") // retried in place, its key waiting
			}
			subj := m.Subject()
			return w.apply(id, subj[strings.LastIndexByte(subj, '.')+1:], seq)
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		w.notef("started instance %d", id)
		w.mu.Unlock()
		inst := &instance{id: id, nc: nc, c: c}
		inst.run = start(t, c)
		t.Cleanup(nc.Close)
		mu.Lock()
		live[id] = inst
		mu.Unlock()
	}
	// kill ends the instance that owns the most partitions. Abruptly, it
	// applies and sends nothing more, as if its process had died;
	// gracefully, it closes with a hand-over (a rolling restart).
	kill := func(abrupt bool) {
		mu.Lock()
		var victim *instance
		most := -1
		for _, in := range live {
			owned := 0
			for _, cs := range in.c.Stats().Consumers {
				if cs.Owned {
					owned++
				}
			}
			if owned > most {
				victim, most = in, owned
			}
		}
		delete(live, victim.id)
		mu.Unlock()
		if most == 0 {
			t.Errorf("the victim owned no partition: the kill tests nothing")
		}
		if abrupt {
			w.kill(victim.id)
			victim.nc.Close()
			_ = victim.run.close(t, time.Second)
		} else if err := victim.run.close(t, 10*time.Second); err != nil {
			t.Errorf("graceful Close: %v", err)
		}
		w.closedDown(victim.id)
		victim.nc.Close()
		t.Logf("stopped instance %d (abruptly: %v; owned %d partitions) at %d applied", victim.id, abrupt, most, w.appliedCount())
		w.mu.Lock()
		w.notef("stopped instance %d (abruptly: %v)", victim.id, abrupt)
		w.mu.Unlock()
	}

	if stalls {
		stop, stopped := make(chan struct{}), make(chan struct{})
		var undo []func()
		// The pauses between stalls are random: at a fixed period they
		// could keep the same phase to the server's redeliveries (every
		// AckWait), and every redelivery of a withheld answer would then
		// arrive across a stall and be withheld again.
		srng := rand.New(rand.NewPCG(seed, 2))
		go func() {
			defer close(stopped)
			for {
				pause := time.NewTimer(time.Duration(100+srng.IntN(300)) * time.Millisecond)
				select {
				case <-stop:
					pause.Stop()
					return
				case <-pause.C:
					undo = append(undo, seqjetstream.AdvanceClock(600*time.Millisecond))
				}
			}
		}()
		t.Cleanup(func() { // after every instance's Close
			<-stopped
			for _, u := range undo {
				u()
			}
		})
		defer close(stop)
	}
	for range instances {
		launch()
	}
	keyName := func(i int) string { return fmt.Sprintf("k%02d", i) }
	published := 0
	publishKey := func(key string) {
		seq := publish(t, js, "in."+key, "x")
		w.publishedAs(key, seq)
		published++
	}
	publishSome := func(n int) {
		for range n {
			publishKey(keyName(rng.IntN(keys)))
		}
	}
	// settle, with WithBalance, publishes to every key (so to every
	// partition: a pin is given at a delivery) until the live instances
	// own every partition, none more than one above another.
	settle := func(when string) {
		if !balance {
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			for i := range keys {
				publishKey(keyName(i))
			}
			mu.Lock()
			var counts []int
			for _, in := range live {
				n := 0
				for _, cs := range in.c.Stats().Consumers {
					if cs.Owned {
						n++
					}
				}
				counts = append(counts, n)
			}
			mu.Unlock()
			sum := 0
			for _, n := range counts {
				sum += n
			}
			if sum == partitions && slices.Max(counts)-slices.Min(counts) <= 1 {
				t.Logf("balanced %s: %v", when, counts)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not balanced %s: partitions owned per live instance %v", when, counts)
			}
			time.Sleep(200 * time.Millisecond) // a publishing rhythm: a heartbeat is 333ms
		}
	}
	settle("at the start")
	for k := range kills {
		publishSome(total / (kills + 1))
		target := published - total/(kills+1)/2
		eventually(t, func() bool { return w.appliedCount() >= target }, "%d applied before kill %d", target, k+1)
		kill(k%2 == 0)
		settle(fmt.Sprintf("after stop %d", k+1))
		launch()
		settle(fmt.Sprintf("after start %d", k+1))
	}
	publishSome(total - total/(kills+1)*kills)

	// state describes, when the wait fails, each live instance's
	// partitions and each consumer's server-side counts.
	state := lazy(func() any {
		var b strings.Builder
		mu.Lock()
		for id, in := range live {
			for _, cs := range in.c.Stats().Consumers {
				fmt.Fprintf(&b, "\ninstance %d %s: owned %v catching up %v buffered %d waiting %d in flight %d dropped %d duplicates %d",
					id, cs.Consumer, cs.Owned, cs.CatchingUp, cs.Buffered, cs.Waiting, cs.InFlight, cs.Dropped, cs.Duplicates)
			}
		}
		mu.Unlock()
		for p := range partitions {
			if cn, err := js.Consumer(context.Background(), "P", fmt.Sprintf("part-%d", p)); err == nil {
				if i, err := cn.Info(context.Background()); err == nil {
					fmt.Fprintf(&b, "\nserver part-%d: ack pending %d pending %d redelivered %d waiting %d",
						p, i.NumAckPending, i.NumPending, i.NumRedelivered, i.NumWaiting)
				}
			}
		}
		return b.String()
	})
	eventually(t, func() bool { return w.appliedCount() == published }, "every message applied (%d of %d):%v",
		lazy(func() any { return w.appliedCount() }), published, state)
	for p := range partitions {
		cn, err := js.Consumer(context.Background(), "P", fmt.Sprintf("part-%d", p))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, func() bool {
			i := info(t, cn)
			return i.NumAckPending == 0 && i.NumPending == 0
		}, "partition %d fully acknowledged", p)
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Fatalf("%d violations (seed %d):\n%s", len(w.violations), seed, strings.Join(w.violations[:min(20, len(w.violations))], "\n"))
	}
	for key, seqs := range w.published {
		for _, s := range seqs {
			if !w.applied[key][s] {
				t.Errorf("lost: %s@%d", key, s)
			}
		}
		if !slices.IsSorted(seqs) {
			t.Errorf("published out of order: %v", seqs)
		}
	}
	withheld := uint64(0)
	mu.Lock()
	for _, in := range live {
		withheld += in.c.Stats().Dropped
	}
	mu.Unlock()
	t.Logf("%d published, %d applications (%d duplicates after kills), %d acks; the live instances dropped %d; %d catch-ups started over", published, w.applies, w.applies-published, w.acks, withheld, w.restarts)
}

// rng2 gives each message a handler time of 0–2ms, derived from its
// sequence so that the test's randomness stays in one seeded source.
func rng2(seq uint64) time.Duration {
	return time.Duration((seq*2654435761)%3) * time.Millisecond
}
