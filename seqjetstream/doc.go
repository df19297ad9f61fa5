// Package seqjetstream consumes NATS JetStream with the messages of each key
// handled one at a time, in stream order, and different keys in parallel,
// on nats.go's jetstream package.
//
// A JetStream consumer gives either order (MaxAckPending=1: one message at
// a time) or parallelism (a worker pool: no order). A Consumer gives both:
// it runs each key as a seqsched session, acknowledges a message once its
// handler returns nil, retries failures in place while the key's later
// messages wait, and keeps held messages from redelivery with InProgress.
//
//	cons, err := stream.Consumer(ctx, "orders") // durable pull consumer, explicit acks
//	if err != nil { ... }
//	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons},
//		func(ctx context.Context, msg jetstream.Msg) error {
//			return apply(ctx, msg) // messages of one subject never overlap
//		}, seqjetstream.WithMaxConcurrency(100))
//	if err != nil { ... }
//	go c.Run(ctx)
//	...
//	err = c.Close(ctx) // stop fetching, finish or give back, no ack after
//
// (jetstream is github.com/nats-io/nats.go/jetstream: this package's name
// does not collide with it, so neither needs an alias.)
//
// # Guarantees
//
//   - Order per key: the messages of one key (the subject, or WithKeyHeader,
//     or WithKeyFunc) on one JetStream consumer run one at a time, in the
//     order the consumer delivers them, which for first deliveries is
//     stream order. With WithPriorityHeader a "high" message runs before
//     its key's queued ones: this reorders the key, by design.
//   - Ack after work: a message is acknowledged only after its handler
//     returned nil; terminated (TermWithReason) only after a terminal error
//     (Terminal) or its last attempt, and once the dead-letter step, if
//     any, succeeded (WithDeadLetter, DeadLetterSubject; a failing one is
//     retried until it succeeds).
//   - Retries in place: a failed attempt (an error, a panic as a
//     *seqsched.PanicError, runtime.Goexit as an error wrapping
//     seqsched.ErrGoexit) is retried after a backoff (WithRetries) while
//     the key's later messages wait; the waiting message holds no
//     concurrency slot.
//   - No redelivery while held: every held message (queued, running,
//     retrying) gets InProgress every third of its AckWait (or of the
//     shortest BackOff step), sooner on a pinned consumer (see Scaling
//     out). A redelivery of a message still held, or of
//     one this consumer resolved recently (an answer lost on the way), is
//     recognised by its stream sequence and not handled again (Stats.
//     Duplicates). A first delivery is never taken for one: after an
//     operator resets the consumer (ResetConsumerToSequence), its replayed
//     messages run again, and what was remembered is forgotten.
//   - Duplicates by key, on a pinned consumer: while an instance holds the
//     pin, it remembers per key the highest stream sequence it resolved
//     (acked after the handler returned nil, or terminated). Per-key order
//     resolved every earlier message of the key first (or holds it still,
//     if a High one overtook it), so a redelivery at or below it that is
//     not held is acked (terminated, if it is that terminated message
//     itself) without its handler. This covers the messages first
//     delivered since the instance gained the pin; the memory starts empty
//     with each pin gained. On a plain consumer, which several instances
//     may share, a lower sequence may be a message another instance (or a
//     delivery lost on its way) left unapplied, so only the sequence rule
//     applies.
//   - Bounds per consumer: each JetStream consumer holds at most its
//     MaxAckPending messages, which must be at most WithMaxBuffered (checked
//     by NewConsumer). Memory is bounded by the sum over consumers, whatever
//     the backlog or the number of keys: idle keys cost nothing (seqsched
//     forgets them) and the redelivery memory is fixed per consumer,
//     4 × WithMaxBuffered sequences and, on a pinned consumer, as many
//     keys (the key updated least recently is forgotten first). A
//     redelivery older than what it remembers runs its handler again.
//   - Independence: each JetStream consumer has its own fetch goroutine,
//     bound and lock. A stuck key can stall at most its own consumer, once
//     its messages fill that consumer's MaxAckPending (the server then
//     delivers nothing more to it: a JetStream rule no client can lift);
//     other consumers, for example other partitions, go on.
//   - Shutdown: Close stops fetching, gives back what has not started,
//     lets running handlers finish and acknowledges them; past its ctx it
//     gives back the rest. Nothing is sent to the server after it returns.
//
// # Scaling out
//
// Several instances may share a plain consumer: each gets some of the
// messages, so order holds within an instance only, and a message that one
// instance held when it died is redelivered, after its AckWait, possibly to
// another instance and after later messages of its key. So is a delivery
// lost on its way to an instance (a pull that ended while it was in
// flight, a reconnect).
//
// For order across instances (and across restarts of a single one),
// partition the stream with a subject transform such as
// "orders.{{partition(8,1)}}.{{wildcard(1)}}" and give each partition a
// durable consumer with PriorityPolicyPinned (nats-server 2.11+); pass all
// of them to every instance. The server pins each partition to one
// instance's pulls at a time and, when that instance stops pulling, pins
// another after PinnedTTL. An instance that gains a partition catches up
// before it runs anything: it holds every message back until all the
// messages the previous owner left unacknowledged have come back to it,
// then runs them in stream order. So per-key order holds across the
// hand-over, which a plain redelivery does not give (JetStream redelivers
// in no particular order, and newer messages may come first). An owner
// also catches up again when a delivery to it was lost on its way: every
// delivery under its pin is its own, so a gap in the consumer's delivery
// sequence shows the loss, and it holds back what follows until the lost
// message is redelivered, after its AckWait. An instance that loses its
// pin drops its queued messages unrun and sends nothing more for them.
//
// A catch-up waits at most four times the longest redelivery wait (the
// AckWait, or the longest BackOff step): what it waits for comes back
// well within that. Half way through, if messages are still missing, the
// owner pulls one message at a time until the catch-up ends or its bound
// starts over: a message lost on its way behind another cannot be lost
// again. Past the bound,
// what is still missing is either a message that never reaches this
// instance, or one still out. Any publisher can store the first kind:
// nats.go takes an empty message with a Status header for a control
// message of the server and drops it, on every redelivery (status.go says
// what else each status makes nats.go do, and how the owner keeps its
// order and its pin); the owner sees such a drop as a gap in the delivery
// sequence behind pulls that could lose nothing on their way (a pull the
// owner ended itself, whose request the server may still hold, is no such
// pull until the server has surely dropped its request). If no more
// are missing than it saw dropped, the catch-up is given up (logged at
// Error, counted in Stats.CatchUpsAbandoned) and the held messages run;
// the epoch remembers how many never came, so its later catch-ups do not
// wait for them again. Otherwise a message may still be out (held past
// its AckWait by a client other than this package, or not yet redelivered
// by the server): the owner starts the catch-up's bound over (logged at
// Warn, counted in Stats.CatchUpsStartedOver), keeping what it holds,
// which need not come again. The partition waits; no message runs after
// a later one of its key. A catch-up starts over as often as a message
// stays out, after a bound each time: a message that a client other than
// this package keeps in progress, or whose redeliveries a starved process
// keeps dropping, stalls the partition for as long as that lasts. From a
// catch-up's third start-over on, each is logged at Error, with how long
// the partition has waited.
//
// Delivery is at least once: a message whose handler ran but whose
// acknowledgement did not reach the server (the instance died, or lost its
// partition) runs again on the next owner. (An acknowledgement lost while
// the instance keeps its pin makes a duplicate by key, see above, as far
// as the memory reaches.) Because order holds, a handler can skip a
// message whose stream sequence is at or below the last one it applied for
// its key, as examples/jetstream's store does.
//
// The server pins a partition to whichever instance pulls first, so one
// instance may own them all. WithBalance shares them out evenly, through
// a membership key-value bucket on the same server: each instance pulls
// only for the partitions assigned to it, and one that owns a partition
// assigned elsewhere (an instance joined or left) steps down and unpins
// it, and the assignee catches up (balance.go). A join moves at most the
// joiner's share, a leave only the leaver's partitions; while membership
// is unavailable every instance pulls for every partition, so none is
// orphaned.
//
// The pin is not a fencing token, so an owner fences its own answers. An
// owner keeps the pin by pulling: the server moves it PinnedTTL after the
// owner's last pull request, and the owner sends its next one as soon as
// a pull ends. It keeps each message it holds from redelivery with
// InProgress, and takes each delivery as it arrives (the catch-up's
// questions to the server wait on a goroutine of their own). So only an
// instance that stalls (a key function that blocks its fetch goroutine, a
// process paused or starved of CPU, a host suspended, a partitioned
// network) can lose its pin while it runs, and only for longer than
// PinnedTTL minus the fetch expiry. It may then still be running
// handlers when another instance takes over, even of messages its stall
// already made it too late to answer (their ctx is canceled once it
// learns; they run again on the new owner: at least once, so a handler
// that must not apply a message twice skips one at or below the last
// sequence it applied for its key, see above). What it never does is
// answer a message whose AckWait may have run out at the server: an
// owner acknowledges, terminates or gives back a held message only within
// its answer window, the shortest AckWait (or BackOff step) less a sixth
// of it, counted from a time at or before the server last started that
// wait (the pull request that brought the message, or the last
// InProgress sent for it), by the monotonic clock and by the wall clock
// alike. Past the window the server may have redelivered the message to a
// new owner, whose catch-up would count it as held while an Ack took it
// off the server's count of unacknowledged messages, and so end while
// another message it waits for is still out. Such an answer is withheld
// and counted in Dropped (and logged at Warn when a handler's answer is
// withheld): a redelivery to the same instance gets it, without running
// the handler again; on a new owner the message runs again. A pinned
// consumer's pulls wait at most a third of that AckWait, whatever
// WithFetchExpiry says, and its InProgress timer fires every sixth of it,
// so that a message arrives with most of its window ahead and is
// refreshed at least a third of the AckWait before the window ends; its
// AckWait must be at least 300ms.
//
// What is left is an assumption: an answer or an InProgress reaches the
// server within a sixth of the AckWait of the window's check, a pause of
// the process between the check and the write to the connection
// included. A connection that holds them longer (a reconnect, a network
// that drops packets), or a client other than this package answering for
// the consumer, can still end a catch-up early. The message it waits for
// then runs late, after later ones of its key: it was first delivered
// before the new owner's pin, so the duplicate rule by key does not take
// it for a duplicate. So does a delivery to the new owner lost on its way
// in the same catch-up, which the miscount can hide too: the gap in the
// consumer sequence that shows the loss also takes the messages before it
// out of the duplicate rule by key. Order is lost then, never the
// message. Such a late answer costs at most the catch-ups of a short
// while: a message done here with its answer withheld is counted as the
// owner's only while the server keeps redelivering it (see
// countWithheldLocked), and a redelivery of one whose answer went out is
// not counted at all, for the late answer may have taken it off the
// server's count after the server sent it.
//
// # Design notes
//
// A Consumer has one partition (partition.go) per JetStream consumer: its
// held messages by stream sequence, its epoch (a pinned consumer's time
// under one pin) and its catch-up; config.go checks each consumer's
// configuration at NewConsumer. The partition's fetch goroutine (fetch.go,
// started by Run) keeps one pull outstanding, of the consumer's
// MaxAckPending (at most the bound), and takes each message: settles its epoch from its pin header,
// computes its key, answers duplicates (resolved.go remembers what was
// answered, by sequence and, for the epoch of a pinned consumer, by key),
// holds and submits new ones. The catch-up (catchup.go) begins with an
// epoch and at each gap in the delivery sequence; its check asks the
// server for the consumer's info on a goroutine of its own and hands the
// answer back, so that the fetch goroutine never waits on the network but
// for its pull, and it is given up, or started over, after a bound. Messages with a Status
// header, which nats.go drops, are status.go's. With WithBalance
// (balance.go) a membership goroutine of Run's assigns the partitions, and
// the fetch goroutine pulls only for assigned ones. Each message's task (process.go) runs its attempts,
// backoffs, dead-letter calls and its final answer as a sequence of
// steps. Every answer to the server (answer.go: Ack, Term,
// Nak, and the InProgress timer) is sent under the partition's gate, after
// checking that the message's epoch is current and the partition open;
// losing the pin and closing (closing.go) take the gate for writing, so no
// answer of an old epoch, and none after Close, goes out. On a pinned
// consumer an Ack or Term also needs the message's answer window
// (answerableLocked in partition.go; see Scaling out): past it the answer
// is withheld for the message's redelivery.
//
// User code runs only at these sites, each through call (process.go),
// never with a lock held. The interceptors (WithInterceptor) run at the
// Handler's site, wrapped around it, and fare as it does:
//
//	site              user code               goroutine          panic                  runtime.Goexit
//	keyOf             KeyFunc                 fetch              logged; key ""         replacement goroutine; key ""
//	step stepAttempt  Handler                 message task       failed attempt         failed attempt (ErrGoexit); process resumes
//	askBackoff        BackoffFunc             message task       logged; DefaultBackoff the same; process resumes
//	step stepDead*    DeadLetterFunc          message task       failed try, retried    the same; process resumes
//	logAt             the logger's handler    fetch, task        record dropped         as the site's own
//	Run, Close        the caller's ctx        the caller's       before any change      before any change
//
// Each ctx given to user code carries a mark; Close called with it begins
// the close and returns an error wrapping seqsched.ErrWouldDeadlock instead
// of waiting for the
// caller's own message. Close never waits for a fetch goroutine (a key
// function may call it), only for held messages; Run waits for its fetch
// goroutines and their catch-up checks.
package seqjetstream
