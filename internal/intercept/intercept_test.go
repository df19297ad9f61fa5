package intercept_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/seqsched/seqsched/internal/intercept"
)

type (
	handler     func(ctx context.Context, msg string) error
	interceptor func(ctx context.Context, msg string, next func(context.Context) error) error
	tagKey      struct{}
)

// tag is an interceptor that logs its entry and exit and adds name to the
// ctx it passes on.
func tag(name string, log *[]string) interceptor {
	return func(ctx context.Context, msg string, next func(context.Context) error) error {
		*log = append(*log, name+">"+msg)
		tags, _ := ctx.Value(tagKey{}).(string)
		err := next(context.WithValue(ctx, tagKey{}, tags+name))
		*log = append(*log, name+"<")
		return err
	}
}

func TestChainNestsFirstOutermostAndPassesTheCtxOn(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	h := intercept.Chain(handler(func(ctx context.Context, msg string) error {
		log = append(log, "handler "+msg+" "+ctx.Value(tagKey{}).(string))
		return boom
	}), []interceptor{tag("outer", &log), tag("inner", &log)})
	assert.Same(t, boom, h(context.Background(), "m"), "the handler's error, through both")
	assert.Equal(t, []string{"outer>m", "inner>m", "handler m outerinner", "inner<", "outer<"}, log, "calls")
}

func TestChainWithoutInterceptorsIsTheHandler(t *testing.T) {
	h := handler(func(context.Context, string) error { return nil })
	got := intercept.Chain(h, []interceptor(nil))
	assert.Equal(t, reflect.ValueOf(h).Pointer(), reflect.ValueOf(got).Pointer(), "Chain(h, nil) is h, unwrapped")
}
