package seqkafka

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitLoop commits done offsets every commit interval until ctx ends.
func (c *Consumer) commitLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.commitLive(); err != nil {
			c.log(ctx, slog.LevelWarn, "seqkafka: commit failed; will retry", "err", err)
		}
	}
}

// commitLive commits every live partition that is not being revoked.
func (c *Consumer) commitLive() error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	ps := make([]*partition, 0, len(c.parts))
	for _, p := range c.parts {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	failed, lost := c.commit(ps)
	return joinCommitErrors(failed, lost)
}

// pending is one partition's part of a commit.
type pending struct {
	p    *partition
	wm   int64
	meta string
}

// commit commits the watermark and done ranges of each of ps whose
// progress changed since its last commit. The caller holds commitMu, so
// that no revocation runs meanwhile: a partition is committed only while
// this member owns it. A partition whose metadata the broker refuses as too
// large is committed again at once with half the metadata bound, which the
// consumer keeps (see WithMaxMetadataBytes). It returns the partitions not
// committed in two *CommitErrors (each nil when none): lost, those the
// broker refused because the group has moved on from this member's
// generation (see takenByGroup), and failed, the rest.
func (c *Consumer) commit(ps []*partition) (failed, lost *CommitError) {
	sent := false
	for len(ps) > 0 {
		all := c.progressOf(ps, int(c.metaLimit.Load()))
		if len(all) == 0 {
			break
		}
		sent = true
		errs, err := c.send(all)
		if err != nil {
			for _, s := range all {
				failed = addFailure(failed, s.p, err)
			}
			break
		}
		ps = ps[:0:0]
		for i, s := range all {
			switch err := errs[i]; {
			case err == nil:
				s.p.mu.Lock()
				s.p.committed, s.p.committedMeta = s.wm, s.meta
				s.p.mu.Unlock()
			case errors.Is(err, kerr.OffsetMetadataTooLarge) && s.meta != "":
				c.shrinkMetaLimit(len(s.meta) / 2)
				ps = append(ps, s.p)
			case takenByGroup(err):
				lost = addFailure(lost, s.p, err)
			default:
				failed = addFailure(failed, s.p, err)
			}
		}
	}
	switch {
	case failed != nil || lost != nil:
		c.commitErrors.Add(1)
	case sent:
		c.commits.Add(1)
	}
	return failed, lost
}

// takenByGroup reports whether a partition's commit error says that the
// group has moved on from the generation the commit carried: a rebalance
// (another member joining or leaving) is replacing it or has replaced it,
// or the member was evicted or fenced. On IllegalGeneration and
// UnknownMemberID kgo reports the partitions lost (see
// kgo.OnPartitionsLost); a member that is closing never rejoins, so a
// rebalance in progress takes its partitions as surely. Their offsets are
// then their next owner's business: it resumes from the last commit.
func takenByGroup(err error) bool {
	for _, e := range []error{kerr.IllegalGeneration, kerr.RebalanceInProgress, kerr.UnknownMemberID, kerr.FencedInstanceID, kerr.StaleMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// joinCommitErrors returns the non-nil ones of errs as one error, or nil.
func joinCommitErrors(errs ...*CommitError) error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return errors.Join(out...)
}

// progressOf returns what to commit for each of ps whose progress changed.
func (c *Consumer) progressOf(ps []*partition, limit int) []pending {
	var all []pending
	for _, p := range ps {
		p.mu.Lock()
		if !p.dead {
			wm, done := p.progress()
			meta := encodeMetadata(wm, done, limit)
			if wm >= 0 && (wm != p.committed || meta != p.committedMeta) {
				all = append(all, pending{p, wm, meta})
			}
		}
		p.mu.Unlock()
	}
	return all
}

func (c *Consumer) shrinkMetaLimit(n int) {
	for {
		cur := c.metaLimit.Load()
		if int64(n) >= cur || c.metaLimit.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

func addFailure(e *CommitError, p *partition, err error) *CommitError {
	if e == nil {
		e = &CommitError{Partitions: make(map[string][]int32), Err: err}
	}
	ps := e.Partitions[p.topic]
	if i, found := slices.BinarySearch(ps, p.part); !found {
		e.Partitions[p.topic] = slices.Insert(ps, i, p.part)
	}
	return e
}

// send commits all in one request, within the commit timeout, and returns
// each partition's error (nil when committed), or the request's error.
func (c *Consumer) send(all []pending) ([]error, error) {
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	at := make(map[tp]int, len(all))
	for i, s := range all {
		if offsets[s.p.topic] == nil {
			offsets[s.p.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[s.p.topic][s.p.part] = kgo.EpochOffset{Epoch: -1, Offset: s.wm}
		at[tp{s.p.topic, s.p.part}] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.commitTimeout)
	defer cancel()
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				// Always set it: an empty string rather than kgo's default,
				// which the next owner would log as foreign.
				if k, ok := at[tp{t.Topic, t.Partitions[j].Partition}]; ok {
					t.Partitions[j].Metadata = &all[k].meta
				}
			}
		}
		return nil
	})
	errs := make([]error, len(all))
	for i := range errs {
		errs[i] = errors.New("seqkafka: partition missing from the commit response")
	}
	var reqErr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			reqErr = err
			return
		}
		// From v10 on, a response names each topic by its ID only (the
		// protocol's TopicID replaces Topic); the request has both.
		names := make(map[[16]byte]string, len(req.Topics))
		for _, t := range req.Topics {
			names[t.TopicID] = t.Topic
		}
		for _, t := range resp.Topics {
			topic := t.Topic
			if topic == "" {
				topic = names[t.TopicID]
			}
			for _, p := range t.Partitions {
				if i, ok := at[tp{topic, p.Partition}]; ok {
					errs[i] = kerr.ErrorForCode(p.ErrorCode)
				}
			}
		}
	})
	if reqErr != nil {
		return nil, reqErr
	}
	return errs, nil
}
