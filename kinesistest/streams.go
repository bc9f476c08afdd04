package kinesistest

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

const account = "000000000000"

// Stream and consumer statuses, as the service names them.
const (
	statusCreating = "CREATING"
	statusActive   = "ACTIVE"
	statusUpdating = "UPDATING"
	statusDeleting = "DELETING"
)

// stream is one stream's state. The Server's mutex guards it.
type stream struct {
	name      string
	arn       string
	id        uint64 // tells this stream from an earlier one of the same name
	created   time.Time
	mode      string
	status    string
	settleAt  time.Time // when a CREATING, UPDATING or DELETING status ends
	shards    []*shard  // by index; closed shards stay
	consumers map[string]*consumer
}

var streamNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// settle ends a pending status whose time has come. It reports false if the stream is gone.
func (s *Server) settle(st *stream, now time.Time) bool {
	if st.status != statusActive && !now.Before(st.settleAt) {
		if st.status == statusDeleting {
			delete(s.streams, st.name)
			return false
		}
		st.status = statusActive
	}
	for name, c := range st.consumers {
		if c.status != statusActive && !now.Before(c.settleAt) {
			if c.status == statusDeleting {
				delete(st.consumers, name)
				continue
			}
			c.status = statusActive
		}
	}
	return true
}

// lookup finds a stream by name or ARN; the caller holds s.mu.
func (s *Server) lookup(name, arn string) (*stream, *apiError) {
	if name == "" && arn != "" {
		i := strings.LastIndex(arn, ":stream/")
		if i < 0 || !strings.HasPrefix(arn, "arn:") {
			return nil, errInvalid("StreamARN %q is not a stream ARN.", arn)
		}
		name = arn[i+len(":stream/"):]
		if j := strings.IndexByte(name, '/'); j >= 0 {
			name = name[:j]
		}
	}
	if name == "" {
		return nil, errInvalid("Neither StreamName nor StreamARN was given.")
	}
	st, ok := s.streams[name]
	if !ok || !s.settle(st, s.now()) {
		return nil, errNotFound("Stream %s under account %s not found.", name, account)
	}
	if arn != "" && arn != st.arn {
		return nil, errNotFound("Stream %s under account %s not found.", arn, account)
	}
	return st, nil
}

type streamRef struct {
	StreamName string `json:",omitempty"`
	StreamARN  string `json:",omitempty"`
}

func (s *Server) createStream(body []byte) (any, *apiError) {
	var in struct {
		StreamName        string
		ShardCount        *int
		StreamModeDetails *struct{ StreamMode string }
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if !streamNameRE.MatchString(in.StreamName) {
		return nil, errValidation("1 validation error detected: Value '%s' at 'streamName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+ and have length 1 to 128", in.StreamName)
	}
	mode := "PROVISIONED"
	if in.StreamModeDetails != nil && in.StreamModeDetails.StreamMode != "" {
		mode = in.StreamModeDetails.StreamMode
	}
	n := 4
	switch mode {
	case "PROVISIONED":
		if in.ShardCount == nil {
			return nil, errInvalid("ShardCount is required for a PROVISIONED stream.")
		}
		n = *in.ShardCount
	case "ON_DEMAND":
		if in.ShardCount != nil {
			return nil, errInvalid("ShardCount must not be given for an ON_DEMAND stream.")
		}
	default:
		return nil, errValidation("StreamMode %q must be PROVISIONED or ON_DEMAND", mode)
	}
	if n < 1 || n > maxShards {
		return nil, errValidation("1 validation error detected: Value '%d' at 'shardCount' failed to satisfy constraint: Member must have value between 1 and %d", n, maxShards)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if st, ok := s.streams[in.StreamName]; ok && s.settle(st, now) {
		return nil, errInUse("Stream %s under account %s already exists.", in.StreamName, account)
	}
	s.nextID++
	st := &stream{
		name:      in.StreamName,
		arn:       fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", s.cfg.region, account, in.StreamName),
		id:        s.nextID,
		created:   now,
		mode:      mode,
		status:    statusCreating,
		settleAt:  now.Add(s.cfg.statusDelay),
		consumers: make(map[string]*consumer),
	}
	for _, r := range uniformRanges(n) {
		st.addShard(r, now, "", "")
	}
	s.streams[st.name] = st
	return struct{}{}, nil
}

func (s *Server) deleteStream(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		EnforceConsumerDeletion bool
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup(in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	if len(st.consumers) > 0 && !in.EnforceConsumerDeletion {
		return nil, errInUse("Stream %s under account %s has registered consumers.", st.name, account)
	}
	now := s.now()
	for _, c := range st.consumers {
		c.status, c.settleAt = statusDeleting, now
		c.endSubscriptions()
	}
	for _, sh := range st.shards {
		sh.wake()
	}
	st.status, st.settleAt = statusDeleting, now.Add(s.cfg.statusDelay)
	s.settle(st, now)
	return struct{}{}, nil
}

type streamDescription struct {
	StreamName              string
	StreamARN               string
	StreamStatus            string
	StreamModeDetails       struct{ StreamMode string }
	Shards                  []shardJSON `json:",omitempty"`
	HasMoreShards           *bool       `json:",omitempty"`
	RetentionPeriodHours    int
	StreamCreationTimestamp epochSeconds
	EnhancedMonitoring      []struct{ ShardLevelMetrics []string }
	EncryptionType          string
	OpenShardCount          *int `json:",omitempty"`
	ConsumerCount           *int `json:",omitempty"`
}

func (st *stream) describe() streamDescription {
	d := streamDescription{
		StreamName:              st.name,
		StreamARN:               st.arn,
		StreamStatus:            st.status,
		RetentionPeriodHours:    24,
		StreamCreationTimestamp: epochSeconds(st.created),
		EnhancedMonitoring:      []struct{ ShardLevelMetrics []string }{{ShardLevelMetrics: []string{}}},
		EncryptionType:          "NONE",
	}
	d.StreamModeDetails.StreamMode = st.mode
	return d
}

func (s *Server) describeStream(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		Limit                 *int
		ExclusiveStartShardId string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	limit, verr := pageSize(in.Limit, "limit", 100, 10000)
	if verr != nil {
		return nil, verr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup(in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	d := st.describe()
	d.Shards = []shardJSON{}
	more := false
	for _, sh := range st.shards {
		if in.ExclusiveStartShardId != "" && sh.id <= in.ExclusiveStartShardId {
			continue
		}
		if len(d.Shards) == limit {
			more = true
			break
		}
		d.Shards = append(d.Shards, sh.json())
	}
	d.HasMoreShards = &more
	return struct{ StreamDescription streamDescription }{d}, nil
}

func (s *Server) describeStreamSummary(body []byte) (any, *apiError) {
	var in streamRef
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup(in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	d := st.describe()
	open := 0
	for _, sh := range st.shards {
		if !sh.isClosed() {
			open++
		}
	}
	consumers := len(st.consumers)
	d.OpenShardCount, d.ConsumerCount = &open, &consumers
	return struct{ StreamDescriptionSummary streamDescription }{d}, nil
}

func (s *Server) listStreams(body []byte) (any, *apiError) {
	var in struct {
		Limit                    *int
		ExclusiveStartStreamName string
		NextToken                string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	limit, verr := pageSize(in.Limit, "limit", 100, 10000)
	if verr != nil {
		return nil, verr
	}
	if in.NextToken != "" {
		raw, err := base64.RawURLEncoding.DecodeString(in.NextToken)
		if err != nil {
			return nil, errInvalid("Invalid NextToken.")
		}
		in.ExclusiveStartStreamName = string(raw)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var names []string
	for name, st := range s.streams {
		if s.settle(st, now) && name > in.ExclusiveStartStreamName {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	more := len(names) > limit
	if more {
		names = names[:limit]
	}
	type summary struct {
		StreamName, StreamARN, StreamStatus string
		StreamModeDetails                   struct{ StreamMode string }
		StreamCreationTimestamp             epochSeconds
	}
	out := struct {
		StreamNames     []string
		StreamSummaries []summary
		HasMoreStreams  bool
		NextToken       string `json:",omitempty"`
	}{StreamNames: append([]string{}, names...), StreamSummaries: []summary{}, HasMoreStreams: more}
	if more {
		out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(names[len(names)-1]))
	}
	for _, name := range names {
		st := s.streams[name]
		sum := summary{StreamName: st.name, StreamARN: st.arn, StreamStatus: st.status, StreamCreationTimestamp: epochSeconds(st.created)}
		sum.StreamModeDetails.StreamMode = st.mode
		out.StreamSummaries = append(out.StreamSummaries, sum)
	}
	return out, nil
}

// epochSeconds encodes a time as the JSON protocol does: seconds since the epoch, with a
// fraction.
type epochSeconds time.Time

func (e epochSeconds) MarshalJSON() ([]byte, error) {
	t := time.Time(e)
	return fmt.Appendf(nil, "%d.%03d", t.Unix(), t.Nanosecond()/1e6), nil
}

func (e *epochSeconds) UnmarshalJSON(b []byte) error {
	var f float64
	if _, err := fmt.Sscanf(string(b), "%g", &f); err != nil {
		return fmt.Errorf("timestamp %s: %w", b, err)
	}
	sec := int64(f)
	*e = epochSeconds(time.Unix(sec, int64((f-float64(sec))*1e9)).Round(time.Millisecond))
	return nil
}

// pageSize is a request's page size parameter (name): def when absent, else within 1 to hi, as
// the service validates it.
func pageSize(v *int, name string, def, hi int) (int, *apiError) {
	if v == nil {
		return def, nil
	}
	if *v < 1 || *v > hi {
		return 0, errValidation("1 validation error detected: Value '%d' at '%s' failed to satisfy constraint: Member must have value between 1 and %d", *v, name, hi)
	}
	return *v, nil
}
