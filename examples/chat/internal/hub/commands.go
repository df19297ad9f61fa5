package hub

import (
	"crypto/subtle"
	"fmt"
	"strings"

	"github.com/seqsched/seqsched"
)

// Commands: a chat text "/kick name" or "/op token". They are rate limited
// on their own (Config.CommandRate), not counted as chat.
const (
	kickCommand = "/kick"
	opCommand   = "/op"
)

// command splits a chat text that is a command into the command and its
// argument; "/kickboxing" is chat.
func command(text string) (cmd, arg string, ok bool) {
	for _, name := range []string{kickCommand, opCommand} {
		if rest, found := strings.CutPrefix(text, name); found && (rest == "" || rest[0] == ' ') {
			return name, strings.TrimSpace(rest), true
		}
	}
	return "", "", false
}

// command carries out c's command cmd with argument arg, answering ref.
func (c *client) command(cmd, arg, ref string) {
	if !c.cmds.Allow() {
		c.refuse(ref, fmt.Sprintf("too many commands: at most %v a second (%d at once); try again",
			c.cmds.Limit(), c.cmds.Burst()))
		return
	}
	switch cmd {
	case kickCommand:
		c.s.kickBy(c, arg, ref)
	case opCommand:
		c.s.makeOperator(c, arg, ref)
	}
}

// makeOperator makes c an operator, who may kick anyone, if token is
// Config.OperatorToken; it answers ref with done or a refusal. The
// comparison takes the same time wherever the token differs, and the
// command rate limit bounds the guesses.
func (s *Server) makeOperator(c *client, token, ref string) {
	switch {
	case s.cfg.OperatorToken == "":
		c.refuse(ref, "this server has no operator")
	case subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.OperatorToken)) != 1:
		c.refuse(ref, "wrong operator token")
	default:
		c.operator.Store(true)
		_ = c.send(encode(Message{Type: KindDone, Ref: ref}), seqsched.High)
	}
}
