package kafka

import (
	"context"
	"fmt"
	"time"

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
			c.commitMu.Lock()
			c.mu.Lock()
			ps := make([]*partition, 0, len(c.parts))
			for _, p := range c.parts {
				if !p.revoking && !p.dead {
					ps = append(ps, p)
				}
			}
			c.mu.Unlock()
			c.commit(ps)
			c.commitMu.Unlock()
		}
	}
}

// commit commits the watermark and done ranges of ps, where they changed
// since the last commit. The caller holds commitMu, so that no revocation
// runs meanwhile: a partition is committed only while this member owns it.
func (c *Consumer) commit(ps []*partition) {
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	metas := make(map[tp]string)
	type sent struct {
		p    *partition
		wm   int64
		meta string
	}
	var all []sent
	c.mu.Lock()
	for _, p := range ps {
		wm := p.watermark()
		if wm < 0 || p.dead {
			continue
		}
		meta := encodeMetadata(wm, p.doneAbove(), MaxMetadataBytes)
		if wm == p.committed && meta == p.committedMeta {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[p.topic][p.part] = kgo.EpochOffset{Epoch: -1, Offset: wm}
		metas[tp{p.topic, p.part}] = meta
		all = append(all, sent{p, wm, meta})
	}
	c.mu.Unlock()
	if len(all) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.commitTimeout)
	defer cancel()
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				// Always set it: an empty string rather than kgo's default,
				// which the next owner would log as foreign.
				if m, ok := metas[tp{t.Topic, t.Partitions[j].Partition}]; ok {
					t.Partitions[j].Metadata = &m
				}
			}
		}
		return nil
	})
	var failed error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			failed = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					failed = fmt.Errorf("topic %s partition %d: error code %d", t.Topic, p.Partition, p.ErrorCode)
				}
			}
		}
	})
	if failed != nil {
		c.log.Warn("seqsched/kafka: commit failed; will retry", "err", failed)
		return
	}
	c.commits.Add(1)
	c.mu.Lock()
	for _, s := range all {
		s.p.committed, s.p.committedMeta = s.wm, s.meta
	}
	c.mu.Unlock()
}
