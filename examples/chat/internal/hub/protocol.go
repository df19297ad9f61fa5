package hub

import "encoding/json"

// Message is one JSON text frame from the server to a client.
type Message struct {
	Type Kind     `json:"type"`
	Seq  uint64   `json:"seq,omitempty"`  // chat: position in the room's one order
	From string   `json:"from,omitempty"` // chat: the sender's name
	ID   ClientID `json:"id,omitempty"`   // welcome: the client's ID
	Name string   `json:"name,omitempty"` // welcome: the client's name
	Text string   `json:"text,omitempty"`
}

// Kind says what a Message is.
type Kind string

// Message kinds. Chat and welcome are ordinary (Normal) traffic; notice,
// warn and kick are control messages sent with seqsched.High.
const (
	KindWelcome Kind = "welcome"
	KindChat    Kind = "chat"
	KindNotice  Kind = "notice"
	KindWarn    Kind = "warn"
	KindKick    Kind = "kick"
)

// inbound is what a client sends: {"text": "..."}.
type inbound struct {
	Text string `json:"text"`
}

func encode(m Message) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic("hub: cannot encode a Message: " + err.Error()) // only strings and numbers: cannot happen
	}
	return b
}
