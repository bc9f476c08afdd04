package kinesub

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"github.com/gostream/kinesub/internal/recordsjson"
	"hash/crc32"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// An enhanced fan-out subscription delivers each record in an event of its own while records
// trickle in, so the cost of one event is the cost of one record. Through the SDK an event
// crosses two goroutines of the SDK's (its event-stream reader and the goroutine turning what
// that reader decoded into the typed union) before the shard's reader receives it, and its
// JSON payload goes through the SDK's generic decoder: most of a subscription's CPU.
//
// eventsProtocol takes the events of one SubscribeToShard call over on the SDK's reader
// goroutine: it reads each event-stream message itself, decodes a SubscribeToShardEvent with
// kinesub's GetRecords decoder (internal/recordsjson) and hands it straight to the shard's reader on
// events. Every other message (an exception, an error, an unknown event type, a message it
// does not read: bad checksums, header types it does not know, JSON it leaves to the SDK) and
// every read error goes, as the bytes it read, to the SDK's protocol, which answers as it
// always does: a typed exception ends the stream with that error, an event goes out on the
// SDK's own channel. Both channels are fed by the one goroutine, one message at a time, so
// events keep their order across them.

// eventsProtocol is the client's protocol for one SubscribeToShard call.
type eventsProtocol struct {
	smithyhttp.ClientProtocol
	events chan<- *types.SubscribeToShardEvent
	done   <-chan struct{} // the request's context's: closed when the subscription is ended

	stream io.Reader     // the event stream, as the SDK's reader passes it
	br     *bufio.Reader // reads stream: a message costs one read of the HTTP/2 body, not ten
	msg    []byte        // the message being read; reused, as the decoder copies what it keeps
	// passed: an event went out on the SDK's channel. Every later message goes there too: one
	// sent on events meanwhile could overtake it, the SDK's channel being a goroutine further.
	passed bool
}

// maxEventMessage bounds the messages eventsProtocol reads itself: larger ones (an event
// carries a few MB at most) go to the SDK.
const maxEventMessage = 16 << 20

// eventBuffer is the read buffer of a subscription, held for its life by every shard read over
// fan-out: room for a few small events, which are what arrive one read at a time (a message
// larger than the buffer is read straight into its own).
const eventBuffer = 4 << 10

// maxKeptMessage bounds the message buffer kept between events: a catch-up event of a few MB
// does not stay held for the rest of the subscription.
const maxKeptMessage = 1 << 20

// Event-stream framing: a prelude (total length, headers length, the prelude's CRC-32), the
// headers, the payload and the CRC-32 of all that precedes it.
const (
	eventPrelude  = 12
	eventOverhead = eventPrelude + 4
)

// fanOutEvents returns the SubscribeToShard call option that installs an eventsProtocol
// handing events to events until done is closed.
func fanOutEvents(events chan<- *types.SubscribeToShardEvent, done <-chan struct{}) func(*kinesis.Options) {
	return func(o *kinesis.Options) {
		if o.Protocol == nil || o.Protocol.ID() != recordsjson.AWSJSON11 {
			return
		}
		o.Protocol = &eventsProtocol{ClientProtocol: o.Protocol, events: events, done: done}
	}
}

// DeserializeEventMessage is called by the SDK's event-stream reader for each message it
// wants. It returns only for what the SDK must see: a message it passes on, the stream's end
// or an error; the SubscribeToShardEvents between go to events.
func (p *eventsProtocol) DeserializeEventMessage(schema *smithy.Schema, reg *smithy.TypeRegistry, r io.Reader) (smithy.Deserializable, error) {
	if p.stream == nil {
		p.stream, p.br = r, bufio.NewReaderSize(r, eventBuffer)
	} else if p.stream != r {
		// Not the stream it buffers: nothing it knows how to share, so the SDK reads it.
		return p.ClientProtocol.DeserializeEventMessage(schema, reg, r)
	}
	if p.passed {
		return p.ClientProtocol.DeserializeEventMessage(schema, reg, p.br)
	}
	// sdk gives the SDK's protocol what was read, followed by rest.
	sdk := func(raw []byte, rest io.Reader) (smithy.Deserializable, error) {
		out, err := p.ClientProtocol.DeserializeEventMessage(schema, reg, io.MultiReader(bytes.NewReader(raw), rest))
		p.passed = err == nil
		return out, err
	}
	for {
		raw, whole, err := p.read()
		switch {
		case err != nil:
			// The SDK reads the same bytes and meets the same error: its EOF, its message.
			return sdk(raw, errReader{err})
		case !whole:
			// A prelude it does not trust: the SDK reads on from it.
			return sdk(raw, p.br)
		}
		ev := decodeEventMessage(raw)
		if cap(p.msg) > maxKeptMessage {
			p.msg = nil // raw stays readable below: only the reference is dropped
		}
		if ev == nil {
			return sdk(raw, errReader{io.EOF}) // a whole message: all the SDK reads
		}
		select {
		case p.events <- ev:
		case <-p.done:
			return nil, io.EOF
		}
	}
}

// read reads the next message. A prelude it leaves to the SDK (a bad checksum, impossible or
// outsized lengths) it returns alone, with whole false; on a read error, what it read.
func (p *eventsProtocol) read() (raw []byte, whole bool, err error) {
	var pre [eventPrelude]byte
	if n, err := io.ReadFull(p.br, pre[:]); err != nil {
		return pre[:n], false, err
	}
	total := binary.BigEndian.Uint32(pre[0:4])
	headers := binary.BigEndian.Uint32(pre[4:8])
	if total < eventOverhead || total > maxEventMessage || headers > total-eventOverhead ||
		crc32.ChecksumIEEE(pre[:8]) != binary.BigEndian.Uint32(pre[8:12]) {
		return pre[:], false, nil
	}
	if cap(p.msg) < int(total) {
		p.msg = make([]byte, total)
	}
	msg := p.msg[:total]
	copy(msg, pre[:])
	if n, err := io.ReadFull(p.br, msg[eventPrelude:]); err != nil {
		return msg[:eventPrelude+n], false, err
	}
	return msg, true, nil
}

// decodeEventMessage decodes a whole message that is a SubscribeToShardEvent, or returns nil
// for any other message or anything it does not read as the SDK would.
func decodeEventMessage(raw []byte) *types.SubscribeToShardEvent {
	msgType, eventType, payload, ok := eventFrame(raw)
	if !ok || string(msgType) != "event" || string(eventType) != "SubscribeToShardEvent" || len(payload) == 0 {
		return nil
	}
	ev := new(types.SubscribeToShardEvent)
	if recordsjson.DecodeEvent(payload, ev) != nil {
		return nil
	}
	return ev
}

// eventFrame checks the checksum of a message read whole (read checked its prelude) and
// returns its message and event types, as eventHeaders does, and its payload: slices of raw.
// ok is false for a message whose checksum fails or whose headers it does not read.
func eventFrame(raw []byte) (msgType, eventType, payload []byte, ok bool) {
	end := len(raw) - 4
	if crc32.ChecksumIEEE(raw[:end]) != binary.BigEndian.Uint32(raw[end:]) {
		return nil, nil, nil, false
	}
	headersEnd := eventPrelude + int(binary.BigEndian.Uint32(raw[4:8]))
	msgType, eventType, ok = eventHeaders(raw[eventPrelude:headersEnd])
	return msgType, eventType, raw[headersEnd:end], ok
}

// eventHeaders returns the message and event types of a message's headers (the last of each,
// as the SDK keeps; slices of h), and false for headers it cannot read or whose types are not
// strings.
func eventHeaders(h []byte) (msgType, eventType []byte, ok bool) {
	for len(h) > 0 {
		n := int(h[0])
		if len(h) < 1+n+1 {
			return nil, nil, false
		}
		name, kind := h[1:1+n], h[1+n]
		h = h[2+n:]
		var size int
		switch kind {
		case 0, 1: // true, false
		case 2: // byte
			size = 1
		case 3: // int16
			size = 2
		case 4: // int32
			size = 4
		case 5, 8: // int64, timestamp
			size = 8
		case 9: // uuid
			size = 16
		case 6, 7: // bytes, string: a 2-byte length first
			if len(h) < 2 {
				return nil, nil, false
			}
			size = 2 + int(binary.BigEndian.Uint16(h))
		default:
			return nil, nil, false
		}
		if len(h) < size {
			return nil, nil, false
		}
		value := h[:size]
		h = h[size:]
		switch string(name) {
		case ":message-type", ":event-type":
			if kind != 7 {
				return nil, nil, false
			}
			if string(name) == ":message-type" {
				msgType = value[2:]
			} else {
				eventType = value[2:]
			}
		}
	}
	return msgType, eventType, true
}

// errReader returns err on every read.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
