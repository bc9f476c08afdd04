package kinesub

import (
	"context"
	"time"
)

// handlerContext is the context a Process handler gets: the values and deadline of the context
// given to Process, and the cancellation of done, a child of the record's generation's run
// context (runContext), which Process also cancels when it ends. done must descend from the
// run context rather than be cancelled by a callback on it: a seek or a lost lease then cancels
// it before Seek (or the lease loss) returns, so a handler started in that instant already finds
// its context ended.
type handlerContext struct {
	context.Context // Process's: values and deadline
	done            context.Context
}

func (c *handlerContext) Done() <-chan struct{} { return c.done.Done() }

// Err is done's, except once Process's context ended too: then that context's (a deadline
// reached gives context.DeadlineExceeded, as a context derived from it would).
func (c *handlerContext) Err() error {
	err := c.done.Err()
	if err == nil {
		return nil
	}
	if perr := c.Context.Err(); perr != nil {
		return perr
	}
	return err
}

// Value answers from done first. done carries no values of its own, only the context
// package's record of its cancellation, which context.Cause and the contexts derived from this
// one (WithCancel, WithTimeout in a handler) then find: they hang on done directly, with no
// goroutine of their own. Every other key is Process's context's.
func (c *handlerContext) Value(key any) any {
	if v := c.done.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// Deadline is Process's context's: done has none.
func (c *handlerContext) Deadline() (time.Time, bool) { return c.Context.Deadline() }
