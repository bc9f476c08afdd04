package kinesub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// registerFanOut finds WithEnhancedFanOut's stream consumer, registers it when missing, and
// waits until it is ACTIVE; it notes the consumer's ARN for the readers. Several instances may
// run it at once: the one whose registration loses the race sees ResourceInUseException and
// waits for the winner's consumer. It never deregisters anything.
func (s *Subscriber) registerFanOut(ctx context.Context) error {
	f := s.cfg.fanOut
	if f == nil {
		return nil
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("%w: consumer %q of stream %s: %s: %w", ErrFanOutConsumer, f.name, s.stream, what, err)
	}
	streamARN, err := s.streamARNOf(ctx)
	if err != nil {
		return fail("describe stream", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.activeWithin)
	defer cancel()
	registered := false
	status := types.ConsumerStatus("")
	var last error // the last retried failure, for the timeout's message
	// expired says why the wait ended with ctx, with the last status and failure seen.
	expired := func(err error) error {
		why := fmt.Errorf("not ACTIVE within %v (status %q): %w", f.activeWithin, status, ctx.Err())
		if last != nil {
			why = fmt.Errorf("%w (last error: %w)", why, last)
		} else if err != nil && !errors.Is(err, ctx.Err()) {
			why = fmt.Errorf("%w (last error: %w)", why, err)
		}
		return fail("wait", why)
	}
	for {
		cctx, ccancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		out, err := s.client.DescribeStreamConsumer(cctx, &kinesis.DescribeStreamConsumerInput{
			StreamARN: aws.String(streamARN), ConsumerName: aws.String(f.name)})
		ccancel()
		var nf *types.ResourceNotFoundException
		switch {
		case err == nil:
			d := out.ConsumerDescription
			status = d.ConsumerStatus
			if status == types.ConsumerStatusActive {
				f.arn = aws.ToString(d.ConsumerARN)
				s.log.Info("fan-out consumer active", "consumer", f.name, "registered", registered)
				return nil
			}
			// CREATING: wait. DELETING: someone deregistered it; register again once gone.
		case errors.As(err, &nf):
			status = ""
			err := s.registerConsumer(ctx, streamARN)
			if err == nil {
				registered = true
				continue // CREATING at once: describe it
			}
			if ctx.Err() != nil {
				return expired(err)
			}
			if isAccessDenied(err) {
				return fail("register", err)
			}
			last = err // throttled, or at the stream's consumer limit: retried until the bound
		case ctx.Err() != nil:
			return expired(err)
		case classify(ctx, err) == errRejected || isAccessDenied(err):
			return fail("describe", err)
		default:
			last = err // throttled or transient: retried until the bound
		}
		t := time.NewTimer(f.describeWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return expired(nil)
		case <-t.C:
		}
	}
}

// registerConsumer registers the consumer; one already registered (a peer won the race) or
// being deleted answers ResourceInUseException, which the caller's next describe sorts out.
func (s *Subscriber) registerConsumer(ctx context.Context, streamARN string) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	_, err := s.client.RegisterStreamConsumer(cctx, &kinesis.RegisterStreamConsumerInput{
		StreamARN: aws.String(streamARN), ConsumerName: aws.String(s.cfg.fanOut.name)})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return err
	}
	return nil
}

// streamARNOf returns the stream's ARN: the consumer calls take no stream name.
func (s *Subscriber) streamARNOf(ctx context.Context) (string, error) {
	if s.ref.arn != "" {
		return s.ref.arn, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	out, err := s.client.DescribeStreamSummary(cctx, &kinesis.DescribeStreamSummaryInput{StreamName: s.ref.streamName()})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.StreamDescriptionSummary.StreamARN), nil
}

// isAccessDenied reports an authorization failure, which waiting does not cure.
func isAccessDenied(err error) bool {
	var ae interface{ ErrorCode() string }
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "AccessDeniedException", "AccessDenied", "UnrecognizedClientException":
		return true
	}
	return false
}
