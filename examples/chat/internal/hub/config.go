package hub

import (
	"log/slog"
	"time"

	"golang.org/x/time/rate"
)

// Config configures a Server. Zero fields take the defaults shown.
type Config struct {
	MaxQueue     int           // messages that may wait for one client before it is disconnected (256)
	WriteTimeout time.Duration // for one message to one client (10s)
	DrainTimeout time.Duration // to flush a leaving client's queue (2s)
	// RateLimit and Burst bound the chat messages one client may send;
	// beyond them it gets a warning instead of a broadcast. A zero
	// RateLimit means 5 per second with a burst of 10; rate.Inf, none.
	RateLimit rate.Limit
	Burst     int
	// SendRate and SendBurst pace what the room sends each client: at
	// most SendRate messages a second, SendBurst at once (seqsched.WithRate).
	// The rest wait in the client's queue, in order, and none is dropped
	// for it; a client whose queue fills (MaxQueue) is still disconnected
	// as too slow. A zero SendRate (or rate.Inf) means no pacing; a
	// SendBurst below 1 means 1. A paced client that leaves has its queue
	// dropped at the same pace (a token per message).
	SendRate  rate.Limit
	SendBurst int
	// Logger receives the room's log and the scheduler's: a client's join
	// and leave (Info), a message not delivered (Debug; Error if its task
	// panicked). Nil means slog.Default().
	Logger *slog.Logger
	// Now stamps the room's messages (time.Now); tests set a fixed clock.
	Now func() time.Time
	// OnLeave, if set, is called when a client's connection handler is
	// about to return, with the reason it left.
	OnLeave func(id ClientID, reason string)
	// BeforeWrite, if set, is called on the client's session before each
	// message is written to it; tests use it to hold a client's messages
	// back while more queue up.
	BeforeWrite func(id ClientID, data []byte)

	// RoomRate and RoomBurst bound the chat messages the whole room
	// accepts, from all clients together (40 a second, 100 at once);
	// beyond them a message is refused with "the room is busy". Each
	// member is sent every message, so this is what keeps a crowd of
	// clients, each within its own limit, from filling the readers'
	// queues: keep RoomRate at most SendRate and RoomBurst at most half
	// MaxQueue. rate.Inf: no room limit. However set, the room also
	// refuses chat while a member that reads is half a queue behind.
	RoomRate  rate.Limit
	RoomBurst int
	// ReadRate and ReadBurst pace the frames read from one client (20 a
	// second, 40 at once), whatever they hold: beyond them the server
	// reads that client's frames more slowly, and TCP makes it wait.
	// rate.Inf: no pacing.
	ReadRate  rate.Limit
	ReadBurst int
	// CommandRate and CommandBurst bound one client's commands (/kick,
	// /op): 1 a second, 3 at once; beyond them a command is refused.
	CommandRate  rate.Limit
	CommandBurst int
	// MaxConns bounds the connections the room serves at once (500), and
	// MaxConnsPerAddr those from one IP address (64); beyond them a new
	// one is refused with 503 Service Unavailable before the upgrade.
	MaxConns        int
	MaxConnsPerAddr int
	// PingEvery is how often the server pings a client (30s), and
	// PingTimeout how long it waits for the pong (10s) before it closes
	// the connection: a client gone without a word, or one that holds a
	// connection open without reading, does not stay for good.
	PingEvery   time.Duration
	PingTimeout time.Duration
	// LagLimit is how long a member that reads may stay half a queue
	// behind (5s): until then the room refuses chat as "busy" to let it
	// catch up; after it, its queue may fill, and it is dropped.
	LagLimit time.Duration
	// PresenceEvery is how often, at most, the members are told of joins,
	// leaves and typing (100ms); see presence.go.
	PresenceEvery time.Duration
	// OperatorToken, if set, lets a client that sends "/op <token>" kick
	// anyone. Without it, only the room's first member (the one connected
	// longest) may kick.
	OperatorToken string
}

func (c Config) withDefaults() Config {
	if c.MaxQueue == 0 {
		c.MaxQueue = 256
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 2 * time.Second
	}
	if c.RateLimit == 0 {
		c.RateLimit, c.Burst = 5, 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SendBurst < 1 {
		c.SendBurst = 1
	}
	if c.RoomRate == 0 {
		c.RoomRate, c.RoomBurst = 40, 100
	}
	if c.ReadRate == 0 {
		c.ReadRate, c.ReadBurst = 20, 40
	}
	if c.CommandRate == 0 {
		c.CommandRate, c.CommandBurst = 1, 3
	}
	// A burst of 0 would refuse everything (and fail every Wait).
	c.RoomBurst, c.ReadBurst, c.CommandBurst = max(c.RoomBurst, 1), max(c.ReadBurst, 1), max(c.CommandBurst, 1)
	if c.MaxConns == 0 {
		c.MaxConns = 500
	}
	if c.MaxConnsPerAddr == 0 {
		c.MaxConnsPerAddr = 64
	}
	if c.PingEvery == 0 {
		c.PingEvery = 30 * time.Second
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = 10 * time.Second
	}
	if c.LagLimit == 0 {
		c.LagLimit = 5 * time.Second
	}
	if c.PresenceEvery == 0 {
		c.PresenceEvery = 100 * time.Millisecond
	}
	return c
}
