package seqsched_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/seqsched/seqsched"
)

// runOrder runs tasks queued by queue behind a gate holding the only slot
// (s must have WithMaxConcurrency(1)) and returns the order in which their labels ran, compressed into runs.
func runOrder(s *seqsched.Scheduler[string], queue func(add func(key, label string, opts ...seqsched.TaskOption))) string {
	open := make(chan struct{})
	started := make(chan struct{})
	s.Go(context.Background(), "gate", func(context.Context) error { close(started); <-open; return nil })
	<-started
	var order []string
	var last *seqsched.Future[struct{}]
	queue(func(key, label string, opts ...seqsched.TaskOption) {
		last, _ = s.Go(context.Background(), key, func(context.Context) error {
			order = append(order, label) // one slot: tasks never overlap
			return nil
		}, opts...)
	})
	close(open)
	last.Await(context.Background())
	s.Shutdown(context.Background())
	var b strings.Builder
	for i := 0; i < len(order); {
		j := i
		for j < len(order) && order[j] == order[i] {
			j++
		}
		fmt.Fprintf(&b, "%s×%d ", order[i], j-i)
		i = j
	}
	return strings.TrimSpace(b.String())
}

// Under a concurrency limit, a task that awaits another session's future
// lends its slot while it waits, so chains of sessions cannot deadlock.
func ExampleWithMaxConcurrency() {
	s, _ := seqsched.New[string](seqsched.WithMaxConcurrency(1))
	defer s.Shutdown(context.Background())

	f, _ := seqsched.Submit(context.Background(), s, "orders", func(ctx context.Context) (string, error) {
		stock, err := seqsched.Submit(ctx, s, "inventory", func(context.Context) (int, error) { return 3, nil })
		if err != nil {
			return "", err
		}
		n, err := stock.Await(ctx) // pass the task's ctx: the slot goes to "inventory" meanwhile
		return fmt.Sprintf("%d in stock", n), err
	})
	v, err := f.Await(context.Background())
	fmt.Println(v, err)
	// Output: 3 in stock <nil>
}

// Premium sessions get three times the turn of basic ones.
func ExampleWithWeight() {
	weight := map[string]int{"premium": 3, "basic": 1}
	s, _ := seqsched.New[string](seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10),
		seqsched.WithWeight(func(key string) int { return weight[key] }))
	fmt.Println(runOrder(s, func(add func(key, label string, opts ...seqsched.TaskOption)) {
		for _, key := range []string{"premium", "basic"} {
			for range 60 {
				add(key, key)
			}
		}
	}))
	// Output: premium×30 basic×10 premium×30 basic×50
}

// With a burst cap, a stream of High tasks lets queued Normal work through.
func ExampleWithHighBurst() {
	s, _ := seqsched.New[string](seqsched.WithHighBurst(3), seqsched.WithMaxConcurrency(1))
	fmt.Println(runOrder(s, func(add func(key, label string, opts ...seqsched.TaskOption)) {
		for range 2 {
			add("conn", "chat")
		}
		for range 7 {
			add("conn", "notice", seqsched.High)
		}
	}))
	// Output: notice×3 chat×1 notice×3 chat×1 notice×1
}

// A time quantum ends turns by time as well as by count. Here it is so short
// that every turn ends after one task.
func ExampleWithYieldInterval() {
	s, _ := seqsched.New[string](seqsched.WithMaxConcurrency(1), seqsched.WithYieldInterval(time.Nanosecond))
	fmt.Println(runOrder(s, func(add func(key, label string, opts ...seqsched.TaskOption)) {
		for range 3 {
			add("A", "A")
		}
		for range 3 {
			add("B", "B")
		}
	}))
	// Output: A×1 B×1 A×1 B×1 A×1 B×1
}

// Tasks that run too long are logged once they return, and counted.
func ExampleWithSlowTask() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{} // vary from run to run
			}
			return a
		},
	}))
	s, _ := seqsched.New[string](seqsched.WithSlowTask(time.Millisecond), seqsched.WithLogger(logger))
	f, _ := s.Go(context.Background(), "acct-9", func(context.Context) error {
		time.Sleep(20 * time.Millisecond) // a slow database call
		return nil
	})
	f.Await(context.Background())
	s.Shutdown(context.Background())
	fmt.Println("slow tasks:", s.Stats().SlowTasks)
	// Output:
	// level=WARN msg="seqsched: slow task" priority=Normal session=acct-9
	// slow tasks: 1
}

// Queue waits per priority, for dashboards and alerts.
func ExampleWithWaitHistogram() {
	s, _ := seqsched.New[string](seqsched.WithWaitHistogram())
	for i := range 4 {
		prio := seqsched.Normal
		if i == 3 {
			prio = seqsched.High
		}
		s.Go(context.Background(), "k", func(context.Context) error { return nil }, prio)
	}
	s.Shutdown(context.Background())
	st := s.Stats()
	fmt.Println("normal waits:", st.Normal.Wait.Count, "high waits:", st.High.Wait.Count)
	fmt.Println("p99 <= max:", st.Normal.Wait.P99 <= st.Normal.Wait.Max)
	// Output:
	// normal waits: 3 high waits: 1
	// p99 <= max: true
}
