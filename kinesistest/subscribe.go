package kinesistest

import (
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

const (
	// takeoverAfter is how long a subscription holds its consumer and shard against a second
	// SubscribeToShard call: within it the call fails with ResourceInUseException, after it the
	// call takes over and the first subscription ends.
	takeoverAfter = 5 * time.Second
	// maxEventSize bounds the records of one event.
	maxEventSize = 1 << 20
)

// subscribeToShard serves SubscribeToShard: an initial-response message, then
// SubscribeToShardEvents, each with the records that arrived since the last one, until the
// subscription's lifetime is over or the shard is closed and read to its end. broken, when not
// nil, is a ResetStream or StreamError fault that ends it after broken.AfterEvents events.
func (s *Server) subscribeToShard(w http.ResponseWriter, r *http.Request, body []byte, broken *Fault) {
	var in struct {
		ConsumerARN      string
		ShardId          string
		StartingPosition startingPosition
	}
	if err := decode(body, &in); err != nil {
		writeError(w, err)
		return
	}
	sub, st, sh, pos, aerr := s.subscribe(in.ConsumerARN, in.ShardId, in.StartingPosition, r.Context().Done())
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer sub.end()
	s.subscriptions.Add(1)
	defer s.subscriptions.Add(-1)
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.WriteHeader(http.StatusOK)
	enc := eventstream.NewEncoder()
	send := func(eventType string, payload []byte) bool {
		var msg eventstream.Message
		msg.Headers.Set(":message-type", eventstream.StringValue("event"))
		msg.Headers.Set(":event-type", eventstream.StringValue(eventType))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		msg.Payload = payload
		if err := enc.Encode(w, msg); err != nil {
			return false
		}
		return http.NewResponseController(w).Flush() == nil
	}
	if !send("initial-response", []byte("{}")) {
		return
	}
	sent := 0 // SubscribeToShardEvents
	breakNow := func() bool {
		if broken == nil || sent < broken.AfterEvents {
			return false
		}
		if broken.Kind == ResetStream {
			// The http.Server resets the stream (RST_STREAM) of a handler that aborts.
			panic(http.ErrAbortHandler)
		}
		var msg eventstream.Message
		msg.Headers.Set(":message-type", eventstream.StringValue("exception"))
		msg.Headers.Set(":exception-type", eventstream.StringValue("InternalFailureException"))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		msg.Payload = []byte(`{"message":"Internal service failure (injected fault)."}`)
		if enc.Encode(w, msg) == nil {
			_ = http.NewResponseController(w).Flush()
		}
		return true
	}
	idle := time.NewTimer(s.cfg.idleEventInterval)
	defer idle.Stop()
	due := true // the first event goes out at once
	for {
		s.mu.Lock()
		now := s.now()
		gone := s.streams[st.name] != st || !s.settle(st, now)
		records := sh.records[:len(sh.records):len(sh.records)]
		changed := sh.changed
		closed := sh.closed
		var children []childShardJSON
		end, size := pos, 0
		for end < len(records) && end-pos < maxGetRecords && (end == pos || size+records[end].size <= maxEventSize) {
			size += records[end].size
			end++
		}
		atEnd := closed && end == len(records)
		if atEnd {
			children = st.childShards(sh)
		}
		s.mu.Unlock()
		if gone {
			return
		}
		if end > pos || atEnd || due {
			if breakNow() {
				return
			}
			cont := seqString(0, sh)
			if end > 0 {
				cont = seqString(records[end-1].counter, sh)
			}
			if !send("SubscribeToShardEvent", appendEvent(records[pos:end], cont, atEnd, children, millisBehind(records, end, now))) {
				return
			}
			pos, sent = end, sent+1
			if atEnd {
				return
			}
			due = false
			idle.Reset(s.cfg.idleEventInterval)
		}
		if now.Sub(sub.started) >= s.cfg.subscriptionLifetime {
			return
		}
		if end < len(records) {
			continue
		}
		select {
		case <-changed:
		case <-idle.C:
			due = true
		case <-sub.ended:
			return
		case <-s.done:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// subscribe checks a SubscribeToShard call and registers its subscription, whose client's
// stream gone closes.
func (s *Server) subscribe(consumerARN, shardID string, start startingPosition, gone <-chan struct{}) (*subscription, *stream, *shard, int, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, c, err := s.findConsumer(consumerARN, "", "")
	if err != nil {
		return nil, nil, nil, 0, err
	}
	if c.status != statusActive {
		return nil, nil, nil, 0, errInUse("Consumer %s is not ACTIVE, instead in state %s.", c.arn, c.status)
	}
	sh := st.shard(shardID)
	if sh == nil {
		return nil, nil, nil, 0, errNotFound("Shard %s in stream %s under account %s does not exist", shardID, st.name, account)
	}
	pos, err := sh.position(start)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	now := s.now()
	if last, ok := c.lastCall[sh.index]; ok && s.cfg.limits && now.Sub(last) < time.Second {
		return nil, nil, nil, 0, errLimit("Rate exceeded for consumer %s and shard %s.", c.arn, sh.id)
	}
	// A call refused for another live subscription counts toward the rate as well.
	c.lastCall[sh.index] = now
	if old, ok := c.subs[sh.index]; ok {
		// A subscription whose client reset or closed its stream has ended, even while its
		// handler has yet to notice: the reset came first on the connection.
		select {
		case <-old.ended:
		case <-old.gone:
		default:
			if now.Sub(old.started) < takeoverAfter {
				return nil, nil, nil, 0, errInUse("Another active subscription exists for consumer %s and shard %s.", c.arn, sh.id)
			}
			old.end()
		}
	}
	sub := &subscription{started: now, ended: make(chan struct{}), gone: gone}
	c.subs[sh.index] = sub
	return sub, st, sh, pos, nil
}

func appendEvent(recs []record, cont string, atEnd bool, children []childShardJSON, behind int64) []byte {
	return appendPage(recs, atEnd, children, behind, func(buf []byte) []byte {
		buf = append(buf, `,"ContinuationSequenceNumber":"`...)
		buf = append(buf, cont...)
		return append(buf, '"')
	})
}
