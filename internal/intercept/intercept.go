// Package intercept nests the broker modules' interceptors (seqkafka's and
// seqjetstream's WithInterceptor) around their handlers: one shape for a
// message of any type, so that both modules nest them alike and neither
// depends on what an interceptor does (tracing, metrics). It is internal:
// users see each module's Interceptor type.
package intercept

import "context"

// Chain returns h wrapped in ics, the first outermost: each interceptor is
// called with the handler call's ctx and message, and its next runs the
// interceptors after it, then h, with the ctx given to next. It returns h
// itself when ics is empty, so that a handler without interceptors is
// called as before.
func Chain[M any, H ~func(context.Context, M) error, I ~func(context.Context, M, func(context.Context) error) error](h H, ics []I) H {
	for i := len(ics) - 1; i >= 0; i-- {
		ic, inner := ics[i], h
		h = func(ctx context.Context, m M) error {
			return ic(ctx, m, func(ctx context.Context) error { return inner(ctx, m) })
		}
	}
	return h
}
