package hub

import "encoding/json"

// Message is one JSON text frame from the server to a client.
type Message struct {
	Type    Kind     `json:"type"`
	Seq     uint64   `json:"seq,omitempty"`     // chat: position in the room's one order
	At      int64    `json:"at,omitempty"`      // chat, join, leave, notice: server time, Unix milliseconds
	From    string   `json:"from,omitempty"`    // chat: the sender's name
	Ref     string   `json:"ref,omitempty"`     // chat, refused: the sender's reference for its message
	ID      ClientID `json:"id,omitempty"`      // welcome: the client's ID
	Name    string   `json:"name,omitempty"`    // welcome: the client's name; join, leave: who
	Members int      `json:"members,omitempty"` // welcome, join, leave: clients in the room now
	Typing  bool     `json:"typing,omitempty"`  // typing: Name is typing (absent: stopped)
	Text    string   `json:"text,omitempty"`
}

// Kind says what a Message is.
type Kind string

// Message kinds. Welcome, chat, join, leave and typing are the room's
// ordinary (Normal) traffic, in one order for every client; notice, warn,
// refused, done and kick are control messages sent with seqsched.High.
const (
	KindWelcome Kind = "welcome" // to a new client: its name and the member count
	KindChat    Kind = "chat"    // a message said in the room, to every client including its sender
	KindJoin    Kind = "join"    // to the others: Name joined
	KindLeave   Kind = "leave"   // to the others: Name left
	KindNotice  Kind = "notice"  // from the server to everyone
	KindWarn    Kind = "warn"    // to one client: a frame the server could not read
	KindRefused Kind = "refused" // to the sender: its message Ref was not delivered, and Text says why
	KindKick    Kind = "kick"    // to one client, before its connection closes
	KindTyping  Kind = "typing"  // to the others: Name started (Typing) or stopped typing; latest wins
	KindDone    Kind = "done"    // to the sender: its command Ref was carried out
)

// MaxText is the longest chat message, in characters, that the room
// delivers; a longer one is refused.
const MaxText = 1000

// maxRef bounds a client's reference for its message.
const maxRef = 64

// inbound is what a client sends: {"text": "...", "ref": "..."}. Ref is
// optional and chosen by the client; the server returns it with the chat
// message (or the refusal, or done for a command) so the sender can match
// the answer. A text "/kick name" is a command: it kicks that member. A
// frame {"typing": true} or {"typing": false} says whether the client is
// typing; it carries no text and gets no answer.
type inbound struct {
	Text   string `json:"text"`
	Ref    string `json:"ref"`
	Typing *bool  `json:"typing"`
}

func encode(m Message) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic("hub: cannot encode a Message: " + err.Error()) // only strings and numbers: cannot happen
	}
	return b
}
